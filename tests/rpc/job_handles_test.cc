// Jobs as handles over a real channel: detach, attach from an offset,
// duplicate ids, ListJobs, Cancel, the conditional stop, take-over.
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/background_dispatch.h"
#include "support/go_file.h"
#include "support/served_worker.h"
#include "support/slowdown.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using Failure = JobOutcome::Failure;

constexpr auto kTimeout = seconds(30);

// Collected is what a Dispatch or Attach call said.
struct Collected {
  std::string out;
  std::string err;
  std::optional<JobJournal::Attachment> attached;
  bool accepted = false;

  DispatchCallbacks Callbacks() {
    DispatchCallbacks callbacks;
    callbacks.on_accepted = [this] { accepted = true; };
    callbacks.on_attached = [this](const JobJournal::Attachment& a) {
      attached = a;
    };
    callbacks.on_output = [this](OutputStream stream, std::string_view data) {
      (stream == OutputStream::kStdout ? out : err).append(data);
    };
    return callbacks;
  }
};

// Numbers 1..n, one a line: output whose every byte says where it is.
std::string Numbers(int n) {
  std::string text;
  for (int i = 1; i <= n; ++i) absl::StrAppend(&text, i, "\n");
  return text;
}

class JobHandlesTest : public test_support::ServedWorkerTest {
 protected:
  // Detached dispatches `request` with a detach grace of `grace` and leaves
  // once it was accepted (its call ends at a short deadline), then lets the
  // job past Gate() once the worker, too, sees nobody attached: output its
  // call's stream took after the client left counts as read (it may go
  // from the buffer before unread output; seen once: 8 KiB).
  void Detached(JobRequest request, Duration grace = Duration(-1)) {
    request.detach_grace = grace;
    Collected seen;
    absl::StatusOr<JobOutcome> outcome =
        Connect()->Dispatch(request, seen.Callbacks(),
                            seconds(1) * test_support::kSanitizerSlowdown);
    ASSERT_FALSE(outcome.ok()) << "the job should outlive its call";
    ASSERT_TRUE(seen.accepted);
    EXPECT_EQ(ClassifyError(Rpc::kDispatch, outcome.status()),
              ErrorKind::kAcceptedDeadlineExceeded);
    ASSERT_TRUE(test_support::WaitFor([&] {
      auto jobs = connection_->ListJobs(kTimeout);
      if (!jobs.ok()) return false;
      for (const JobInfo& job : *jobs) {
        if (job.job_id == request.job_id) return !job.attached;
      }
      return false;
    }));
    go_.Open();
  }
  // Gate is a shell command that waits until Detached's call has ended: so
  // a job ends after it, and writes only once nobody is attached, however
  // slow the machine.
  std::string Gate() const { return go_.WaitCommand(); }

  // FirstJob waits until the first job listed meets `done`.
  template <typename Predicate>
  bool FirstJob(Predicate done) {
    return test_support::WaitFor([&] {
      auto jobs = connection_->ListJobs(kTimeout);
      return jobs.ok() && !jobs->empty() && done(jobs->front());
    });
  }
  // Ended waits until the first job has ended.
  bool Ended() {
    return FirstJob([](const JobInfo& job) { return !job.running; });
  }
  // Ready waits until the first job has written to its stdout (it has set
  // itself up).
  bool Ready() {
    return FirstJob(
        [](const JobInfo& job) { return job.written.stdout_bytes > 0; });
  }
  // AttachAll attaches to job `id` from offset 0 and reads it to its end.
  absl::StatusOr<JobOutcome> AttachAll(const std::string& id, Collected& seen) {
    return connection_->Attach(id, {}, seen.Callbacks(), kTimeout);
  }
  // ZerosLater is a job that writes `bytes` zeros once nobody is attached.
  JobRequest ZerosLater(int bytes) const {
    return test_support::ExecRequest(
        {"sh", "-c", absl::StrCat(Gate(), "; head -c ", bytes, " /dev/zero")});
  }

  const test_support::GoFile go_;
};

TEST_F(JobHandlesTest, ADetachedJobRunsOnAndAttachGetsEveryByteAndItsCode) {
  JobRequest request = test_support::ExecRequest(
      {"sh", "-c",
       absl::StrCat("seq 1 20000; ", Gate(),
                    "; sleep 1; seq 20001 40000; exit 3")});
  ASSERT_NO_FATAL_FAILURE(Detached(request));
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = AttachAll(request.job_id, seen);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(3));
  ASSERT_TRUE(seen.attached.has_value());
  EXPECT_EQ(seen.attached->lost.stdout_bytes, 0u);
  EXPECT_EQ(seen.out, Numbers(40000));
}

TEST_F(JobHandlesTest, AttachFromAnOffsetInTheMiddleGetsTheRestExactly) {
  JobRequest request =
      test_support::ExecRequest({"sh", "-c", "seq 1 30000; " + Gate()});
  ASSERT_NO_FATAL_FAILURE(Detached(request));
  ASSERT_TRUE(Ended());
  const std::string all = Numbers(30000);
  const uint64_t middle = all.size() / 2 + 3;
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = connection_->Attach(
      request.job_id, {.stdout_bytes = middle}, seen.Callbacks(), kTimeout);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_TRUE(seen.attached->ended);
  EXPECT_EQ(seen.attached->from.stdout_bytes, middle);
  EXPECT_EQ(seen.out, all.substr(middle));
}

TEST_F(JobHandlesTest, ADetachGraceThatRunsOutCancelsTheJob) {
  JobRequest request = test_support::ExecRequest({"sleep", "300"});
  ASSERT_NO_FATAL_FAILURE(Detached(request, milliseconds(200)));
  // (An Attach within the grace would keep it.)
  ASSERT_TRUE(Ended());
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = AttachAll(request.job_id, seen);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, Failure::kCancelled);
}

TEST_F(JobHandlesTest, ASecondJobOfARunningIdIsRefusedOrAttachedAsAsked) {
  JobRequest request =
      test_support::ExecRequest({"sh", "-c", "echo once; sleep 1"});
  test_support::BackgroundDispatch running(address(), request);
  absl::StatusOr<JobOutcome> again = connection_->Dispatch(request, {});
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, again.status()),
            ErrorKind::kAlreadyExists)
      << again.status();

  request.attach_if_exists = true;
  Collected seen;
  absl::StatusOr<JobOutcome> attached =
      Connect()->Dispatch(request, seen.Callbacks(), kTimeout);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_FALSE(seen.accepted);
  ASSERT_TRUE(seen.attached.has_value()) << "attached, not started";
  EXPECT_EQ(seen.out, "once\n");
  EXPECT_EQ(*attached, JobOutcome::Exited(0));
  const absl::StatusOr<JobOutcome> first = running.Outcome();
  // The first call was taken over: its job ran on, under the second call.
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, first.status()),
            ErrorKind::kOutcomeUnknown);
}

TEST_F(JobHandlesTest, ListJobsShowsTheProgramButNeverItsArgumentsOrEnv) {
  JobRequest request =
      test_support::ExecRequest({"sh", "-c", "sleep 30 # secret-argument"});
  MutableExec(request).env["TOKEN"] = "secret-env";
  test_support::BackgroundDispatch running(address(), request);
  absl::StatusOr<std::vector<JobInfo>> jobs = connection_->ListJobs(kTimeout);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  const JobInfo& job = jobs->front();
  EXPECT_EQ(job.job_id, request.job_id);
  EXPECT_EQ(job.kind, "exec");
  EXPECT_EQ(job.program, "sh");
  EXPECT_EQ(job.client, "plaintext");
  EXPECT_TRUE(job.running);
  EXPECT_TRUE(job.attached);
  EXPECT_FALSE(job.outcome.has_value());
  const auto age = std::chrono::system_clock::now() - job.started;
  EXPECT_LT(age, std::chrono::minutes(1));
  EXPECT_GE(age, -std::chrono::minutes(1));

  absl::StatusOr<JobOutcome> cancelled =
      connection_->Cancel(request.job_id, Duration::zero(), kTimeout);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  (void)running.Outcome();
  jobs = connection_->ListJobs(kTimeout);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_FALSE(jobs->front().running);
  EXPECT_EQ(jobs->front().outcome->failure, Failure::kCancelled);
}

TEST_F(JobHandlesTest, CancelLetsAJobThatTrapsTermFinishWithinTheGrace) {
  JobRequest request = test_support::ExecRequest(
      {"sh", "-c",
       "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"});
  test_support::BackgroundDispatch running(address(), request);
  ASSERT_TRUE(Ready());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobOutcome> cancelled =
      connection_->Cancel(request.job_id, seconds(10), kTimeout);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
  EXPECT_EQ(cancelled->failure, Failure::kCancelled);
  EXPECT_THAT(cancelled->message, Not(HasSubstr("SIGKILL")));
  (void)running.Outcome();
}

TEST_F(JobHandlesTest, CancelKillsAJobThatIgnoresTermAtTheGrace) {
  JobRequest request = test_support::ExecRequest(
      {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"});
  test_support::BackgroundDispatch running(address(), request);
  ASSERT_TRUE(Ready());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<JobOutcome> cancelled =
      connection_->Cancel(request.job_id, seconds(1), kTimeout);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_THAT(cancelled->message, HasSubstr("SIGKILL"));
  EXPECT_GE(took, milliseconds(900));
  // Killed at the 1 s grace, not at the worker's 5 s kill grace.
  EXPECT_LE(took, seconds(1) + seconds(1) * test_support::kSanitizerSlowdown);
  (void)running.Outcome();
}

TEST_F(JobHandlesTest, AnUnknownJobIsNotFound) {
  EXPECT_EQ(
      ClassifyError(Rpc::kAttach,
                    connection_->Attach("nobody", {}, {}, kTimeout).status()),
      ErrorKind::kNotFound);
  EXPECT_EQ(ClassifyError(
                Rpc::kCancel,
                connection_->Cancel("nobody", seconds(0), kTimeout).status()),
            ErrorKind::kNotFound);
}

TEST_F(JobHandlesTest, AConditionalStopIsRefusedWhileBusyAndKeepsServing) {
  test_support::BackgroundDispatch running(
      address(), test_support::ExecRequest({"sleep", "3"}));
  absl::StatusOr<StopSummary> refused =
      connection_->Stop(seconds(0), kTimeout, Duration::zero());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ClassifyError(Rpc::kStop, refused.status()), ErrorKind::kStillBusy);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("in flight"));
  EXPECT_FALSE(worker_->stopping());
  const absl::StatusOr<JobOutcome> outcome = running.Outcome();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  absl::StatusOr<StopSummary> stopped =
      connection_->Stop(seconds(0), kTimeout, Duration::zero());
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE(worker_->stopping());
}

TEST_F(JobHandlesTest, AFullBufferPausesADetachedJobUntilAClientReads) {
  constexpr int kBytes = 12 << 20;  // three buffers' worth
  JobRequest request = ZerosLater(kBytes);
  ASSERT_NO_FATAL_FAILURE(Detached(request));
  // Held back at the buffer, never dropped: the job waits in write(2).
  ASSERT_TRUE(test_support::WaitFor([&] {
    auto jobs = connection_->ListJobs(kTimeout);
    return jobs.ok() &&
           jobs->front().retained_bytes >=
               static_cast<uint64_t>(Job::kDefaultOutputBufferBytes);
  }));
  absl::StatusOr<std::vector<JobInfo>> jobs = connection_->ListJobs(kTimeout);
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->front().running);
  EXPECT_EQ(jobs->front().dropped_bytes, 0u);
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = AttachAll(request.job_id, seen);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(seen.out.size(), static_cast<size_t>(kBytes));
}

TEST_F(JobHandlesTest, DropOldestReportsExactlyTheBytesItDropped) {
  constexpr int kBytes = 12 << 20;
  JobRequest request = ZerosLater(kBytes);
  request.drop_oldest = true;
  ASSERT_NO_FATAL_FAILURE(Detached(request));
  ASSERT_TRUE(Ended());
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = AttachAll(request.job_id, seen);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  ASSERT_TRUE(seen.attached.has_value());
  EXPECT_GT(seen.attached->lost.stdout_bytes, 0u);
  EXPECT_EQ(seen.attached->lost.stdout_bytes + seen.out.size(),
            static_cast<uint64_t>(kBytes));
  EXPECT_EQ(seen.attached->from.stdout_bytes, seen.attached->lost.stdout_bytes);
}

}  // namespace
}  // namespace cfdb::worker

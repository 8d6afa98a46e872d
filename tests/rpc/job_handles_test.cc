// Jobs as handles over a real channel: detach, attach from an offset,
// duplicate ids, ListJobs, Cancel, the conditional stop, take-over.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
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
  // The second call followed: the first, undisturbed, has the outcome too.
  const absl::StatusOr<JobOutcome> first = running.Outcome();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, JobOutcome::Exited(0));
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

// Followers (issue 35): any number of calls read a job, each the whole
// stream, and none disturbs another or the call that dispatched it.
void ExpectFollowersGetTheWholeStream(const std::string& address,
                                      const std::string& id,
                                      const std::string& expected,
                                      const JobOutcome& end) {
  constexpr int kFollowers = 50;
  std::vector<std::thread> threads;
  std::vector<Collected> seen(kFollowers);
  std::vector<absl::StatusOr<JobOutcome>> outcomes(
      kFollowers, absl::UnknownError("not run"));
  for (int i = 0; i < kFollowers; ++i) {
    threads.emplace_back([&, i] {
      auto connection = WorkerConnection::Open(address);
      ASSERT_TRUE(connection.ok());
      outcomes[i] =
          (*connection)->Attach(id, {}, seen[i].Callbacks(), kTimeout);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kFollowers; ++i) {
    ASSERT_TRUE(outcomes[i].ok()) << i << ": " << outcomes[i].status();
    EXPECT_EQ(*outcomes[i], end) << i;
    EXPECT_EQ(seen[i].out.size(), expected.size()) << i;
    EXPECT_TRUE(seen[i].out == expected) << i << ": a different stream";
  }
}

TEST_F(JobHandlesTest, FiftyFollowersOfARunningJobGetTheIdenticalStream) {
  const JobRequest request = test_support::ExecRequest(
      {"sh", "-c", absl::StrCat(Gate(), "; seq 1 50000; sleep 0.5")});
  test_support::BackgroundDispatch running(address(), request);
  std::thread open([this] {
    std::this_thread::sleep_for(milliseconds(300));
    go_.Open();  // once the followers are (mostly) there
  });
  ExpectFollowersGetTheWholeStream(address(), request.job_id, Numbers(50000),
                                   JobOutcome::Exited(0));
  open.join();
  const absl::StatusOr<JobOutcome> first = running.Outcome();
  ASSERT_TRUE(first.ok()) << "the dispatching call was disturbed: "
                          << first.status();
  EXPECT_EQ(*first, JobOutcome::Exited(0));
}

TEST_F(JobHandlesTest, FiftyReplaysOfAnEndedJobGetTheIdenticalStream) {
  JobRequest request = test_support::ExecRequest({"seq", "1", "50000"});
  Collected dispatched;
  ASSERT_TRUE(
      connection_->Dispatch(request, dispatched.Callbacks(), kTimeout).ok());
  ExpectFollowersGetTheWholeStream(address(), request.job_id, Numbers(50000),
                                   JobOutcome::Exited(0));
}

TEST_F(JobHandlesTest, TakeOverEndsTheControllerWithItsOwnKindNever74) {
  const JobRequest request = test_support::ExecRequest(
      {"sh", "-c", absl::StrCat("echo one; ", Gate(), "; echo two")});
  test_support::BackgroundDispatch running(address(), request);
  ASSERT_TRUE(Ready());
  Collected seen;
  std::thread open([this] {
    std::this_thread::sleep_for(milliseconds(200));
    go_.Open();
  });
  absl::StatusOr<JobOutcome> taken =
      connection_->Attach(request.job_id, {}, seen.Callbacks(), kTimeout,
                          JobJournal::Role::kControl);
  open.join();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, JobOutcome::Exited(0));
  EXPECT_EQ(seen.out, "one\ntwo\n");
  const absl::StatusOr<JobOutcome> first = running.Outcome();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, first.status()),
            ErrorKind::kTakenOver);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kTakenOver), 68);
}

TEST_F(JobHandlesTest, AnAttachPastTheEndWaitsForThoseBytes) {
  const JobRequest request = test_support::ExecRequest(
      {"sh", "-c", absl::StrCat("echo 12345; ", Gate(), "; echo 67890")});
  test_support::BackgroundDispatch running(address(), request);
  ASSERT_TRUE(Ready());
  std::thread open([this] {
    std::this_thread::sleep_for(milliseconds(200));
    go_.Open();
  });
  Collected seen;
  absl::StatusOr<JobOutcome> outcome = connection_->Attach(
      request.job_id, {.stdout_bytes = 8}, seen.Callbacks(), kTimeout);
  open.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(seen.attached->from.stdout_bytes, 8u) << "not the current end, 6";
  EXPECT_EQ(seen.out, "890\n");
}

TEST_F(JobHandlesTest, ACancelledDetachedJobsOutcomeCountsAsRead) {
  JobRequest request = test_support::ExecRequest({"sleep", "300"});
  ASSERT_NO_FATAL_FAILURE(Detached(request));
  absl::StatusOr<JobOutcome> cancelled =
      connection_->Cancel(request.job_id, seconds(0), kTimeout);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->failure, Failure::kCancelled);
  // Nothing unread holds the worker up: an idle stop goes through at once.
  const absl::StatusOr<StopSummary> stop =
      connection_->Stop(seconds(0), kTimeout, Duration::zero());
  EXPECT_TRUE(stop.ok()) << stop.status();
}

TEST_F(JobHandlesTest,
       ARetainedResultKeepsNeitherItsArgumentsNorItsEnvironment) {
  JobRequest request =
      test_support::ExecRequest({"/nonexistent/program", "argument"});
  MutableExec(request).env["BIG"] = std::string(900 << 10, 'x');
  EXPECT_EQ(connection_->Dispatch(request, {}, kTimeout)->failure,
            Failure::kStartFailed);
  const std::vector<std::shared_ptr<Job>> jobs = worker_->Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(FindExec(jobs.front()->request()), nullptr) << "spec released";
  EXPECT_EQ(jobs.front()->request().program, "/nonexistent/program");
}

TEST_F(JobHandlesTest, AProgramLongerThanAPathIsRefusedBeforeAnythingRuns) {
  const JobRequest request =
      test_support::ExecRequest({std::string(500 << 10, 'p')});
  const absl::StatusOr<JobOutcome> outcome =
      connection_->Dispatch(request, {}, kTimeout);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outcome.status().message(), HasSubstr("exec.argv[0]"));
  EXPECT_TRUE(worker_->Jobs().empty());
}

// 10,000 results with 256-byte ids: about 3 MB of JobInfo, near a stock
// client's 4 MiB; the largest page a stock client can ask for fits, and
// paging gives every result once, oldest first.
TEST_F(JobHandlesTest, AStockClientPagesThroughTenThousandResults) {
  constexpr int kJobs = 10000;
  for (int i = 0; i < kJobs; ++i) {
    JobRequest echo{.job_id = absl::StrFormat("%0256d", i), .kind = "echo"};
    ASSERT_TRUE(connection_->Dispatch(echo, {}, kTimeout).ok()) << i;
  }
  auto stub = v1::Worker::NewStub(
      grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  std::vector<std::string> ids;
  v1::ListJobsRequest asked;
  asked.set_page_size(1000);
  do {
    grpc::ClientContext context;
    v1::ListJobsReply page;
    const grpc::Status status = stub->ListJobs(&context, asked, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_LE(page.jobs_size(), 1000);
    for (const v1::JobInfo& job : page.jobs()) ids.push_back(job.job_id());
    asked.set_page_token(page.next_page_token());
  } while (!asked.page_token().empty());
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(ids[i], absl::StrFormat("%0256d", i)) << "in order, once each";
  }
  asked.set_page_size(1001);
  grpc::ClientContext context;
  v1::ListJobsReply page;
  EXPECT_EQ(stub->ListJobs(&context, asked, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace cfdb::worker

#include "cfdb/worker/exec.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <deque>
#include <fstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/feed.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using test_support::CollectingJob;
using test_support::ExecRequest;
using ::testing::HasSubstr;
using Failure = JobOutcome::Failure;

using test_support::RandomBytes;

// ExitsWithin reports whether process `pid` exits within `timeout`, waiting
// on its pidfd (an exited, unreaped process counts as exited).
bool ExitsWithin(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const bool exited = poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  close(fd);
  return exited;
}

TEST(ExecTest, RoundTripsSeveralMebibytesThroughCatByteExact) {
  CollectingJob job([] {
    JobRequest r = ExecRequest({"cat"});
    MutableExec(r).stdin_data = RandomBytes(5 << 20);
    return r;
  }());
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(0));
  EXPECT_TRUE(job.out() == FindExec(job.request())->stdin_data)
      << "got " << job.out().size() << " bytes";
}

// StreamingJob is a job whose stdin is streamed (JobContext::TakeStdin):
// the test pushes chunks and the end; the job counts what RunExec took and
// whether it said the program's stdin closed early.
class StreamingJob final : public Job {
 public:
  explicit StreamingJob(JobRequest request,
                        Duration kill_grace = std::chrono::seconds(5))
      : Job(std::move(request), kill_grace),
        ready_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~StreamingJob() override { close(ready_fd_); }

  void Push(std::string chunk) {
    absl::MutexLock lock(&mu_);
    chunks_.push_back(std::move(chunk));
    Ready();
  }
  void End() {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    Ready();
  }
  int taken() {
    absl::MutexLock lock(&mu_);
    return taken_;
  }
  int closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  std::string out() {
    absl::MutexLock lock(&mu_);
    return out_;
  }
  std::string err() {
    absl::MutexLock lock(&mu_);
    return err_;
  }

  void OnAccepted() override {}
  void OnOutcome(const JobOutcome&) override {}
  EmitResult Emit(OutputStream stream, std::string_view data,
                  TimePoint) override {
    absl::MutexLock lock(&mu_);
    (stream == OutputStream::kStdout ? out_ : err_).append(data);
    return EmitResult::kSent;
  }
  bool stdin_streamed() const override { return true; }
  int stdin_fd() const override { return ready_fd_; }
  StdinResult TakeStdin(std::string& chunk) override {
    absl::MutexLock lock(&mu_);
    if (chunks_.empty()) {
      if (ended_) return StdinResult::kEnd;
      uint64_t value;
      (void)!read(ready_fd_, &value, sizeof value);
      return StdinResult::kNotYet;
    }
    chunk = std::move(chunks_.front());
    chunks_.pop_front();
    ++taken_;
    return StdinResult::kChunk;
  }
  void CloseStdin() override {
    absl::MutexLock lock(&mu_);
    ++closed_;
  }

 private:
  void Ready() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t one = 1;
    (void)!write(ready_fd_, &one, sizeof one);
  }

  const int ready_fd_;
  absl::Mutex mu_;
  std::deque<std::string> chunks_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  int taken_ ABSL_GUARDED_BY(mu_) = 0;
  int closed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
};

// The request's stdin goes first, then each chunk in order (an empty one
// included), then the end closes the pipe; nothing is reported closed early.
TEST(ExecTest, StreamedStdinFollowsTheRequestsInOrderThenEnds) {
  JobRequest request = ExecRequest({"cat"});
  MutableExec(request).stdin_data = "pre-";
  StreamingJob job(request);
  const std::string big = RandomBytes(3 << 20);
  std::optional<JobOutcome> outcome;
  std::thread runner([&] { outcome = RunExec(job); });
  job.Push("a");
  job.Push("");
  job.Push("bc");
  job.Push(big);
  job.End();
  runner.join();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_TRUE(job.out() == "pre-abc" + big) << job.out().size() << " bytes";
  EXPECT_EQ(job.taken(), 4);
  EXPECT_EQ(job.closed(), 0);
}

// A program that closes its stdin while input is still to come is reported
// once (so the client stops sending) and runs on to its own end.
TEST(ExecTest, AProgramClosingItsStreamedStdinIsReported) {
  StreamingJob job(
      ExecRequest({"sh", "-c", "exec 0<&-; sleep 0.2; echo still here"}));
  job.Push(RandomBytes(1 << 20));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(0));
  EXPECT_EQ(job.out(), "still here\n");
  EXPECT_EQ(job.closed(), 1);
}

// A cancelled job's input was cut short: its program must never see an end
// of file, even one that ignores SIGTERM (it is killed after the grace). The
// cancel waits until the program ignores SIGTERM: before, SIGTERM alone would
// end it.
TEST(ExecTest, ACancelledJobNeverSeesTheEndOfItsInput) {
  for (const bool time_limit : {false, true}) {
    JobRequest request = ExecRequest(
        {"sh", "-c",
         "trap '' TERM; echo ready >&2; wc -c; echo saw the end of file"});
    // Long enough for sh to ignore SIGTERM first on a loaded machine.
    if (time_limit) MutableExec(request).time_limit = std::chrono::seconds(3);
    StreamingJob job(request, std::chrono::milliseconds(300));
    job.Push("14 bytes here\n");
    std::optional<JobOutcome> outcome;
    std::thread runner([&] { outcome = RunExec(job); });
    ASSERT_TRUE(test_support::WaitFor(
        [&] { return job.taken() == 1 && job.err() == "ready\n"; }));
    if (!time_limit) job.Cancel();
    runner.join();
    EXPECT_EQ(outcome->failure,
              time_limit ? Failure::kTimeLimitExceeded : Failure::kCancelled);
    EXPECT_THAT(outcome->message, HasSubstr("SIGKILL"));
    EXPECT_EQ(job.out(), "") << "the program took a cut-short input for whole";
    EXPECT_EQ(job.closed(), 1) << "the client hears that no more is taken";
  }
}

// A chunk is taken only once the pipe took the last: a program that does
// not read holds its input back at the first chunk (4 MiB is more than a
// pipe holds). Waiting for input, the time limit still counts.
TEST(ExecTest, StreamedStdinIsTakenOnlyAsTheProgramReads) {
  JobRequest request = ExecRequest({"sleep", "300"});
  MutableExec(request).time_limit = std::chrono::milliseconds(300);
  StreamingJob job(request);
  for (int i = 0; i < 4; ++i) job.Push(RandomBytes(4 << 20));
  const JobOutcome outcome = RunExec(job);
  EXPECT_EQ(outcome.failure, Failure::kTimeLimitExceeded);
  EXPECT_EQ(job.taken(), 1);
  EXPECT_EQ(job.closed(), 1) << "the client hears that no more is taken";

  JobRequest silent = ExecRequest({"cat"});
  MutableExec(silent).time_limit = std::chrono::milliseconds(200);
  StreamingJob waiting(silent);
  EXPECT_EQ(RunExec(waiting).failure, Failure::kTimeLimitExceeded);
}

// Each job is a session of its own, so no process of one job can move into
// another running job's process group (setpgid works only within a
// session), where the leftover sweep would spare it.
TEST(ExecTest, AJobCannotJoinAnotherJobsProcessGroup) {
  CollectingJob first(ExecRequest({"sh", "-c", "echo $$; exec sleep 300"}));
  std::thread runner([&] { RunExec(first); });
  ASSERT_TRUE(first.WaitForOutput("\n"));
  const std::string group = first.out().substr(0, first.out().find('\n'));
  CollectingJob second(ExecRequest(
      {"/usr/bin/python3", "-c",
       "import os, sys\ntry:\n  os.setpgid(0, int(sys.argv[1]))\n"
       "  print('joined')\nexcept PermissionError:\n  print('refused')",
       group}));
  EXPECT_EQ(RunExec(second), JobOutcome::Exited(0)) << second.err();
  EXPECT_EQ(second.out(), "refused\n");
  first.Cancel();
  runner.join();
}

TEST(ExecTest, ReportsExitCodeAndStderr) {
  CollectingJob job(ExecRequest({"sh", "-c", "echo oops >&2; exit 3"}));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(3));
  EXPECT_EQ(job.err(), "oops\n");
  EXPECT_EQ(job.out(), "");
}

TEST(ExecTest, ReportsTheTerminatingSignal) {
  CollectingJob job(ExecRequest({"sh", "-c", "kill -9 $$"}));
  EXPECT_EQ(RunExec(job), JobOutcome::Signaled(SIGKILL));
}

TEST(ExecTest, MissingProgramIsAStartFailureWithTheReason) {
  CollectingJob job(ExecRequest({"/nonexistent/program"}));
  const JobOutcome outcome = RunExec(job);
  EXPECT_EQ(outcome.failure, Failure::kStartFailed);
  EXPECT_THAT(outcome.message, HasSubstr("No such file or directory"));
}

TEST(ExecTest, NonExecutableFileIsAStartFailure) {
  char path[] = "/tmp/cfdb-exec-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  CollectingJob job(ExecRequest({path}));
  const JobOutcome outcome = RunExec(job);
  unlink(path);
  EXPECT_EQ(outcome.failure, Failure::kStartFailed);
  EXPECT_THAT(outcome.message, HasSubstr("Permission denied"));
}

TEST(ExecTest, BadWorkingDirectoryIsAStartFailure) {
  JobRequest request = ExecRequest({"true"});
  MutableExec(request).cwd = "/nonexistent/dir";
  CollectingJob job(request);
  const JobOutcome outcome = RunExec(job);
  EXPECT_EQ(outcome.failure, Failure::kStartFailed);
  EXPECT_THAT(outcome.message, HasSubstr("working directory /nonexistent/dir"));
}

TEST(ExecTest, UsesTheGivenEnvironmentAndWorkingDirectoryOnly) {
  JobRequest request = ExecRequest({"sh", "-c", "echo \"$FOO|$HOME\"; pwd"});
  MutableExec(request).env["FOO"] = "bar";
  MutableExec(request).cwd = "/tmp";
  CollectingJob job(request);
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(0));
  EXPECT_EQ(job.out(), "bar|\n/tmp\n") << "HOME is not inherited";
}

TEST(ExecTest, ProgramThatClosesStdinEarlyDoesNotHurtTheWorker) {
  JobRequest request = ExecRequest({"head", "-c", "1"});
  MutableExec(request).stdin_data = RandomBytes(4 << 20);
  CollectingJob job(request);
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(0));
  EXPECT_EQ(job.out().size(), 1u);
}

TEST(ExecTest, TimeLimitCancelsTheJob) {
  JobRequest request = ExecRequest({"sleep", "300"});
  MutableExec(request).time_limit = std::chrono::milliseconds(200);
  CollectingJob job(request);
  const JobOutcome outcome = RunExec(job);
  EXPECT_EQ(outcome.failure, Failure::kTimeLimitExceeded);
  EXPECT_THAT(outcome.message, HasSubstr("SIGTERM"));
}

TEST(ExecTest, CancelKillsTheWholeProcessGroup) {
  CollectingJob job(ExecRequest({"sh", "-c", "sleep 300 & echo $!; wait"}));
  std::optional<JobOutcome> outcome;
  std::thread runner([&] { outcome = RunExec(job); });
  ASSERT_TRUE(job.WaitForOutput("\n"));
  const pid_t grandchild = std::stoi(job.out());
  job.Cancel();
  runner.join();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->failure, Failure::kCancelled);
  EXPECT_TRUE(ExitsWithin(grandchild, std::chrono::seconds(10)))
      << "the background sleep was left running";
}

TEST(ExecTest, JobIgnoringSigtermIsKilledAfterTheKillGrace) {
  CollectingJob job(
      ExecRequest({"sh", "-c", "trap '' TERM; echo ready; sleep 300"}),
      std::chrono::milliseconds(200));
  std::optional<JobOutcome> outcome;
  std::thread runner([&] { outcome = RunExec(job); });
  ASSERT_TRUE(job.WaitForOutput("ready"));
  job.Cancel();
  runner.join();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->failure, Failure::kCancelled);
  EXPECT_THAT(outcome->message, HasSubstr("SIGKILL"));
}

TEST(ExecTest, LeftoverGroupMembersAreKilledWhenTheProgramExits) {
  CollectingJob job(ExecRequest({"sh", "-c", "sleep 300 & echo $!"}));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(0));
  const pid_t grandchild = std::stoi(job.out());
  EXPECT_TRUE(ExitsWithin(grandchild, std::chrono::seconds(10)));
}

TEST(ExecTest, NoZombieRemainsAfterJobs) {
  for (const char* script : {"exit 0", "kill -9 $$", "sleep 300 & exit 1"}) {
    CollectingJob job(ExecRequest({"sh", "-c", script}));
    RunExec(job);
  }
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD) << "every child was reaped";
}

}  // namespace
}  // namespace cfdb::worker

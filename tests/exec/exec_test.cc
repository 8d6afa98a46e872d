#include "cfdb/worker/exec.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/test_job.h"

namespace cfdb::worker {
namespace {

using testing::CollectingJob;
using testing::ExecRequest;
using ::testing::HasSubstr;
using Failure = JobOutcome::Failure;

std::string RandomBytes(size_t n) {
  std::mt19937_64 rng(42);
  std::string data(n, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  return data;
}

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

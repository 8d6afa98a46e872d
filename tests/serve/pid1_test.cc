// The daemon as PID 1 of a fresh PID namespace (unshare, as root): it
// handles its signals, reaps the orphans its jobs leave, and leaves nothing
// behind.
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/proc_util.h"
#include "support/test_job.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::Daemon;
using test_support::ExecRequest;

constexpr auto kTimeout = seconds(30);

// ProcessesRunning counts processes on this machine whose command line is
// exactly `argv` joined by NULs.
int ProcessesRunning(const std::string& cmdline) {
  int n = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", error)) {
    const std::string text = test_support::ProcFile(entry.path() / "cmdline");
    n += text == cmdline;
  }
  return n;
}

class Pid1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "unshare --pid needs root";
  }
};

TEST_F(Pid1Test, ReapsOrphansAndLeavesNothingBehind) {
  Daemon daemon({"--idle-timeout-seconds", "0"},
                {"unshare", "--pid", "--fork", "--mount-proc"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  EXPECT_EQ(daemon.pid(), 1) << "the worker is PID 1 of its namespace";
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());

  // A job that leaves a background grandchild in its group (killed, then an
  // orphan zombie for PID 1 to reap), and one that escapes with setsid
  // (killed too: it belongs to no running job); the job waits for the
  // escapee to say it has its own session before it exits.
  for (const char* script :
       {"sleep 2727 & echo $!",
        "setsid -f sh -c 'echo ok; exec sleep 2828 >/dev/null' | head -n1"}) {
    absl::StatusOr<JobOutcome> outcome =
        (*connection)
            ->Dispatch(ExecRequest({"sh", "-c", script}), {}, kTimeout);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  }

  // Inside the namespace, zombies go away (the orphan reaper sweeps every
  // 500 ms); ask with ps until none is left.
  const TimePoint give_up = std::chrono::steady_clock::now() + kTimeout;
  std::string zombies = "?";
  while (!zombies.empty() && std::chrono::steady_clock::now() < give_up) {
    std::string ps;
    absl::StatusOr<JobOutcome> outcome =
        (*connection)
            ->Dispatch(ExecRequest({"ps", "-e", "-o", "stat=,pid=,args="}),
                       {.on_output = [&](OutputStream,
                                         std::string_view d) { ps.append(d); }},
                       kTimeout);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    zombies.clear();
    std::istringstream lines(ps);
    for (std::string line; std::getline(lines, line);) {
      std::string stat;
      std::istringstream(line) >> stat;
      if (stat.starts_with("Z")) zombies += line + "\n";
    }
  }
  EXPECT_EQ(zombies, "") << "zombies left in the namespace";
  const std::string escaped = std::string(
      "sleep\0"
      "2828\0",
      11);
  EXPECT_EQ(ProcessesRunning(escaped), 0)
      << "the setsid escapee ended with its job";

  ASSERT_TRUE((*connection)->Stop(seconds(5), kTimeout).ok());
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  // When PID 1 exits the kernel kills its namespace; wait for the escapee.
  const TimePoint gone_by = std::chrono::steady_clock::now() + kTimeout;
  while (ProcessesRunning(escaped) > 0 &&
         std::chrono::steady_clock::now() < gone_by) {
    std::this_thread::yield();
  }
  EXPECT_EQ(ProcessesRunning(escaped), 0)
      << "a stray process outlived the daemon";
  EXPECT_EQ(ProcessesRunning(std::string("sleep\0"
                                         "2727\0",
                                         11)),
            0);
}

TEST_F(Pid1Test, SigtermToPid1StopsTheWorker) {
  Daemon daemon({"--idle-timeout-seconds", "0"},
                {"unshare", "--pid", "--fork", "--mount-proc"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());
  // kill -TERM 1 from inside: PID 1 ignores signals it has no handler for,
  // so this only works because the worker handles SIGTERM itself.
  absl::StatusOr<JobOutcome> outcome =
      (*connection)
          ->Dispatch(ExecRequest({"kill", "-TERM", "1"}), {}, kTimeout);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), ::testing::HasSubstr("exiting: signal"));
}

}  // namespace
}  // namespace cfdb::worker

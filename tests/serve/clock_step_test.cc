// Wall-clock steps: the daemon under libfaketimeMT with the monotonic clock
// left real (FAKETIME_DONT_FAKE_MONOTONIC=1), its wall clock stepped by an
// hour either way while it runs. Every timed wait is on the monotonic clock,
// so none of them moves: idle retirement, the drain grace, the poll cadence
// and a signal's wakeup keep their times, and nothing spins. Each test first
// proves the step took effect: the daemon's log timestamps jump by an hour.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cfdb/worker/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/proc_util.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::Daemon;

constexpr auto kTimeout = seconds(30);

TimePoint Now() { return std::chrono::steady_clock::now(); }
double Since(TimePoint start) { return ToSeconds(Now() - start); }

// A clock step: the timestamp file libfaketime reads on every call.
class Step {
 public:
  explicit Step(std::string offset) : offset_(std::move(offset)) {
    path_ = std::filesystem::temp_directory_path() /
            absl::StrCat("cfdb-faketime-", getpid(), "-", counter_++);
    Write("+0");
  }
  ~Step() { std::filesystem::remove(path_); }

  // Wrapper runs the daemon under libfaketimeMT reading this file. (In an
  // ASan build the preloaded library comes before ASan's runtime, which ASan
  // accepts once told.)
  std::vector<std::string> Wrapper() const {
    const char* asan = std::getenv("ASAN_OPTIONS");
    return {"env",
            absl::StrCat("LD_PRELOAD=", CFDB_FAKETIME_LIBRARY),
            absl::StrCat("FAKETIME_TIMESTAMP_FILE=", path_.string()),
            "FAKETIME_NO_CACHE=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
            absl::StrCat("ASAN_OPTIONS=", asan != nullptr ? asan : "",
                         ":verify_asan_link_order=0")};
  }
  // Take steps the daemon's wall clock by the offset.
  void Take() { Write(offset_); }
  double seconds() const { return offset_.starts_with("-") ? -3600 : 3600; }

 private:
  void Write(const std::string& text) {
    const std::filesystem::path tmp = path_.string() + ".tmp";
    std::ofstream(tmp) << text << "\n";
    std::filesystem::rename(tmp, path_);
  }
  static inline int counter_ = 0;
  std::string offset_;
  std::filesystem::path path_;
};

// LineSeconds is the wall time a log line starts with, in seconds since the
// epoch (-1 if it starts with none).
double LineSeconds(const std::string& line) {
  absl::Time time;
  std::string error;
  if (!absl::ParseTime("%Y-%m-%d%ET%H:%M:%E*S%Ez", line.substr(0, 29), &time,
                       &error)) {
    return -1;
  }
  return absl::ToDoubleSeconds(time - absl::UnixEpoch());
}

// WallSeconds returns the wall-clock time of the first log line containing
// `text` (-1 if there is none).
double WallSeconds(const std::string& log, const std::string& text) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(text) == std::string::npos) continue;
    if (const double seconds = LineSeconds(line); seconds >= 0) return seconds;
  }
  return -1;
}

// CpuSeconds returns the user + system time `pid` has used.
double CpuSeconds(pid_t pid) {
  const std::string stat =
      test_support::ProcFile(absl::StrCat("/proc/", pid, "/stat"));
  if (stat.find(')') == std::string::npos) return -1;
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 14; ++i) rest >> field;  // state .. cmajflt
  long utime = 0, stime = 0;
  rest >> utime >> stime;
  return static_cast<double>(utime + stime) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

class ClockStepTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(CFDB_FAKETIME_LIBRARY))
        << "libfaketimeMT (Debian package faketime) is needed: "
        << CFDB_FAKETIME_LIBRARY;
  }
};

// (a) and (d): an idle daemon still retires at its idle timeout, not an hour
// off, and idles without spinning (< 0.2 s of CPU over 5 s).
TEST_P(ClockStepTest, IdleRetirementKeepsItsTimeAndNothingSpins) {
  Step step(GetParam());
  const TimePoint start = Now();
  Daemon daemon(
      {"--idle-timeout-seconds", "6", "--idle-poll-interval-seconds", "1"},
      step.Wrapper());
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  std::this_thread::sleep_until(start + milliseconds(500));
  step.Take();
  const double cpu_before = CpuSeconds(daemon.pid());
  std::this_thread::sleep_until(start + milliseconds(5500));
  const double cpu = CpuSeconds(daemon.pid()) - cpu_before;
  EXPECT_LT(cpu, 0.2) << "CPU seconds over 5 s of idling after the step";
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  // From before the daemon started to after it exited: startup and exit
  // (LSan's leak check under ASan) come on top of the 6 s. A step the
  // daemon follows would make it an hour.
  EXPECT_GT(Since(start), 5) << daemon.log();
  EXPECT_LT(Since(start), 6 + 2 * test_support::kSanitizerSlowdown)
      << daemon.log();
  const std::string log = daemon.log();
  EXPECT_NEAR(
      WallSeconds(log, "exiting: idle") - WallSeconds(log, "listening on"),
      step.seconds() + 6, 2)
      << "the step took effect: " << log;
}

// (b): a drain with grace 3 s ends at the grace, not an hour off.
TEST_P(ClockStepTest, DrainGraceKeepsItsTime) {
  Step step(GetParam());
  Daemon daemon(
      {"--idle-timeout-seconds", "0", "--task-kill-grace-seconds", "1"},
      step.Wrapper());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());
  absl::StatusOr<JobOutcome> outcome;
  std::thread job([&] {
    outcome = (*connection)
                  ->Dispatch(test_support::ExecRequest({"sleep", "100"}), {},
                             kTimeout);
  });
  ASSERT_TRUE(test_support::WaitFor([&] {
    absl::StatusOr<double> idle = (*connection)->IdleTime(seconds(5));
    return idle.ok() && *idle == 0;
  }));
  const TimePoint stop_at = Now();
  std::thread stopper([&] { (void)(*connection)->Stop(seconds(3), kTimeout); });
  ASSERT_TRUE(daemon.WaitForLog("stop rpc: draining"));
  step.Take();
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  // The grace, then the exit; a step the drain followed would make it an
  // hour.
  EXPECT_GT(Since(stop_at), 2) << daemon.log();
  EXPECT_LT(Since(stop_at), 3 + 2 * test_support::kSanitizerSlowdown)
      << daemon.log();
  stopper.join();
  job.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, JobOutcome::Failure::kCancelled);
  const std::string log = daemon.log();
  EXPECT_NEAR(
      WallSeconds(log, "drained in") - WallSeconds(log, "stop rpc: draining"),
      step.seconds() + 3, 2)
      << "the step took effect: " << log;
}

// (c): while idle polls fail (a 1 us deadline), the poll cadence keeps its
// time, and a SIGTERM during the wait between polls ends the daemon at
// once, not at the next poll. gRPC rounds a deadline up to its millisecond
// timer, so an answer on a warm loopback connection (~0.3 ms) can beat the 1
// us: the poll after the failure may be answered (an answered poll retired the
// worker when its idle timeout was 1 s). So the idle timeout is long, the log
// level is debug (every answer is logged), and the poll after the failure
// counts whether it failed or was answered: it comes one interval after the
// failure either way. The SIGTERM comes right after a poll, so a daemon
// that waited for the next one would take the interval (3 s), and one that
// ends at once takes well under half of it, whatever the build and the
// load (an exit took 0.5 s under ASan at ctest -j6).
TEST_P(ClockStepTest, SigtermDuringPollFailuresEndsItAtOnce) {
  constexpr double kInterval = 3.0;
  Step step(GetParam());
  Daemon daemon(
      {"--idle-timeout-seconds", "3600", "--idle-poll-interval-seconds",
       absl::StrCat(kInterval), "--idle-poll-deadline-seconds", "0.000001",
       "--log-level", "debug"},
      step.Wrapper());
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  ASSERT_TRUE(daemon.WaitForLog("idle poll failed ("));
  step.Take();
  // The wall times of the first failure and of the poll after it.
  const auto poll_times = [&daemon] {
    std::vector<double> times;
    std::istringstream lines(daemon.log());
    for (std::string line; std::getline(lines, line);) {
      const bool failed = line.find("idle poll failed") != std::string::npos;
      const bool answered = line.find("idle poll: idle") != std::string::npos;
      if (failed || (answered && !times.empty())) {
        times.push_back(LineSeconds(line));
      }
    }
    return times;
  };
  ASSERT_TRUE(test_support::WaitFor([&] { return poll_times().size() >= 2; },
                                    seconds(30)))
      << daemon.log();
  const std::vector<double> polls = poll_times();
  EXPECT_NEAR(polls[1] - polls[0], step.seconds() + kInterval, 1.0)
      << "the step took effect, and the cadence kept its interval: "
      << daemon.log();
  const TimePoint signalled = Now();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_LT(Since(signalled), kInterval / 2) << daemon.log();
}

// (e): a timed wait of abseil's (gRPC's timers and queues wait the same
// way) that starts at once after the step lasts its 100 ms. Without the
// interposer the kernel measures abseil's wall-clock deadline on the real
// clock: after the step forward the wait lasts the hour, after the step back
// it ends at once (both seen with step_waiter built without it).
TEST_P(ClockStepTest, AnAbseilWaitRightAfterTheStepKeepsItsTime) {
  Step step(GetParam());
  test_support::CollectingJob waiter(test_support::ExecRequest([&] {
    std::vector<std::string> argv = step.Wrapper();
    argv.push_back(CFDB_STEP_WAITER);
    return argv;
  }()));
  std::thread run([&] { (void)RunExec(waiter); });
  const bool ready = waiter.WaitForOutput("ready");
  if (!ready) {
    waiter.Cancel();
    run.join();
  }
  ASSERT_TRUE(ready) << waiter.out() << waiter.err();
  step.Take();
  const bool done = waiter.WaitForOutput("waited_ms");
  if (!done) waiter.Cancel();
  run.join();
  ASSERT_TRUE(done) << "no answer within 30 s: " << waiter.out()
                    << waiter.err();
  std::smatch m;
  const std::string out = waiter.out();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(waited_ms (\d+))")))
      << out;
  const int waited_ms = std::stoi(m[1]);
  EXPECT_GE(waited_ms, 90) << "a 100 ms wait, in ms";
  EXPECT_LT(waited_ms, 10000) << "a 100 ms wait, in ms (a step: 3.6e6)";
}

INSTANTIATE_TEST_SUITE_P(Steps, ClockStepTest, ::testing::Values("+1h", "-1h"),
                         [](const auto& p) {
                           return std::string(p.param[0] == '+' ? "Forward"
                                                                : "Backward");
                         });

}  // namespace
}  // namespace cfdb::worker

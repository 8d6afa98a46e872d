// Promises that hold under stress, on real daemons with real `sleep` jobs:
// stop requests compose whatever their source, a flood of Stop calls costs
// no thread each, a stalled reader is never told "retry", a worker that
// dies outright takes its jobs with it, and a dispatch racing a worker's
// retirement either runs or is told to retry.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/background_dispatch.h"
#include "support/daemon.h"
#include "support/proc_util.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using test_support::StatusNumber;

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::Daemon;
using test_support::ExecRequest;
using test_support::WaitFor;
using ::testing::HasSubstr;
using Failure = JobOutcome::Failure;

constexpr auto kTimeout = seconds(60);

TimePoint Now() { return std::chrono::steady_clock::now(); }

double Since(TimePoint start) { return ToSeconds(Now() - start); }

// JsonLine returns the daemon's first JSON line with `field`: the drain's
// ("drain_seconds"), the exit event ("exit_reason").
nlohmann::json JsonLine(const std::string& log, std::string_view field) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_object() && json.contains(field)) return json;
  }
  return {};
}

// StopRequestFields returns the exit event's stop_request_* fields.
std::map<std::string, double> StopRequestFields(const nlohmann::json& exit) {
  std::map<std::string, double> fields;
  for (const auto& [key, value] : exit.items()) {
    if (key.starts_with("stop_request_")) fields[key] = value.get<double>();
  }
  return fields;
}

enum class Ending { kIdle, kStopWhileIdle, kStopWhileBusy, kLifetime, kSignal };

class ExitEventTest : public ::testing::TestWithParam<Ending> {};

// The exit event says what each field means, whatever ended the worker:
// how long it lived, the lifetime drawn and the one configured, how long it
// had been idle when the stop was requested (not the last poll reading),
// and each source that asked, with the grace it asked for.
TEST_P(ExitEventTest, FieldsSayWhatTheyMean) {
  const Ending ending = GetParam();
  std::vector<std::string> args = {"--log-format",
                                   "json",
                                   "--max-lifetime-grace-seconds",
                                   "30",
                                   "--task-kill-grace-seconds",
                                   "1",
                                   "--idle-poll-interval-seconds",
                                   "0.2",
                                   "--idle-timeout-seconds",
                                   ending == Ending::kIdle ? "1" : "0"};
  if (ending == Ending::kLifetime) {
    args.insert(args.end(), {"--max-lifetime-seconds", "1.5"});
  }
  const TimePoint started = Now();
  Daemon daemon(args);
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());
  std::optional<test_support::BackgroundDispatch> busy;
  if (ending == Ending::kStopWhileBusy) {
    busy.emplace(daemon.address(), ExecRequest({"sleep", "100"}), kTimeout);
  } else if (ending == Ending::kStopWhileIdle || ending == Ending::kSignal) {
    // Idle for a second at least, so that "0" could not pass.
    ASSERT_TRUE(WaitFor([&] {
      absl::StatusOr<double> idle = (*connection)->IdleTime(seconds(5));
      return idle.ok() && *idle >= 1.0;
    }));
  }
  const TimePoint asked = Now();
  std::optional<std::thread> stop;
  if (ending == Ending::kStopWhileIdle || ending == Ending::kStopWhileBusy) {
    stop.emplace([&] { (void)(*connection)->Stop(seconds(1), kTimeout); });
  } else if (ending == Ending::kSignal) {
    ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  }
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
  const double lived = Since(started);
  if (stop) stop->join();
  const nlohmann::json exit = JsonLine(daemon.log(), "exit_reason");
  ASSERT_TRUE(exit.is_object()) << daemon.log();

  const char* reason = ending == Ending::kIdle       ? "idle"
                       : ending == Ending::kLifetime ? "max lifetime"
                       : ending == Ending::kSignal   ? "signal"
                                                     : "stop rpc";
  EXPECT_EQ(exit["exit_reason"], reason);
  const double uptime = exit["uptime_seconds"].get<double>();
  EXPECT_GT(uptime, 0.0);
  EXPECT_LE(uptime, lived) << "time lived, from the daemon's start";
  const double idle = exit["idle_seconds"].get<double>();
  switch (ending) {
    case Ending::kIdle:
      EXPECT_GE(idle, 1.0);
      EXPECT_EQ(exit["idle_timeout_seconds"].get<double>(), 1.0);
      break;
    case Ending::kStopWhileBusy:
      EXPECT_EQ(idle, 0.0) << "a job was in flight";
      break;
    case Ending::kLifetime:
      EXPECT_GE(uptime, 1.5);
      EXPECT_GT(idle, 1.0) << "idle since start";
      break;
    case Ending::kStopWhileIdle:
    case Ending::kSignal:
      EXPECT_GE(idle, 1.0) << "idle when the stop came, not 0";
      EXPECT_LE(idle, ToSeconds(asked - started) + 0.5)
          << "at the request, not later";
      break;
  }
  EXPECT_LE(idle, uptime);
  // The daemon pins the jitter to 0: drawn and configured agree.
  const double lifetime = ending == Ending::kLifetime ? 1.5 : 43200;
  EXPECT_EQ(exit["max_lifetime_seconds"].get<double>(), lifetime);
  EXPECT_EQ(exit["max_lifetime_configured_seconds"].get<double>(), lifetime);
  EXPECT_EQ(exit["max_lifetime_jitter_seconds"].get<double>(), 0.0);
  const std::map<std::string, double> requests = StopRequestFields(exit);
  switch (ending) {
    case Ending::kIdle:
      EXPECT_EQ(requests,
                (std::map<std::string, double>{{"stop_request_idle", 30}}));
      break;
    case Ending::kLifetime:
      EXPECT_EQ(
          requests,
          (std::map<std::string, double>{{"stop_request_max_lifetime", 30}}));
      break;
    case Ending::kSignal:
      EXPECT_EQ(requests,
                (std::map<std::string, double>{{"stop_request_sigterm", 0}}))
          << "the signal grace";
      break;
    case Ending::kStopWhileIdle:
    case Ending::kStopWhileBusy:
      EXPECT_EQ(requests,
                (std::map<std::string, double>{{"stop_request_stop_rpc", 1}}));
      break;
  }
  if (busy) {
    absl::StatusOr<JobOutcome> outcome = busy->Outcome();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(outcome->failure, Failure::kCancelled);
  }
}

INSTANTIATE_TEST_SUITE_P(Endings, ExitEventTest,
                         ::testing::Values(Ending::kIdle,
                                           Ending::kStopWhileIdle,
                                           Ending::kStopWhileBusy,
                                           Ending::kLifetime, Ending::kSignal),
                         [](const auto& p) {
                           switch (p.param) {
                             case Ending::kIdle:
                               return "Idle";
                             case Ending::kStopWhileIdle:
                               return "StopWhileIdle";
                             case Ending::kStopWhileBusy:
                               return "StopWhileBusy";
                             case Ending::kLifetime:
                               return "Lifetime";
                             case Ending::kSignal:
                               return "Signal";
                           }
                           return "";
                         });

enum class First { kLifetime, kStopRpc };
enum class Second { kSigterm0, kSigterm2, kStopShorter, kStopLonger };

struct Row {
  First first;
  Second second;
};

std::string Name(const Row& row) {
  return absl::StrCat(row.first == First::kLifetime ? "Lifetime" : "StopRpc",
                      "Then",
                      row.second == Second::kSigterm0      ? "Sigterm0"
                      : row.second == Second::kSigterm2    ? "Sigterm2"
                      : row.second == Second::kStopShorter ? "ShorterStop"
                                                           : "LongerStop");
}

class ComposeDaemonTest : public ::testing::TestWithParam<Row> {};

// A drain is running (begun by the max lifetime, or by a Stop RPC); a second
// request arrives. The drain ends at the earliest deadline: a short job
// finishes in it, a `sleep 100` is cancelled at it.
TEST_P(ComposeDaemonTest, TheDrainEndsAtTheEarliestDeadline) {
  const Row row = GetParam();
  constexpr double kFirstGrace = 6;  // the drain's own grace, in seconds
  const double signal_grace = row.second == Second::kSigterm2 ? 2 : 0;
  std::vector<std::string> args = {"--idle-timeout-seconds",
                                   "0",
                                   "--log-format",
                                   "json",
                                   "--max-concurrent-tasks",
                                   "2",
                                   "--task-kill-grace-seconds",
                                   "1",
                                   "--signal-grace-seconds",
                                   absl::StrCat(signal_grace)};
  if (row.first == First::kLifetime) {
    args.insert(args.end(),
                {"--max-lifetime-seconds", "1", "--max-lifetime-grace-seconds",
                 absl::StrCat(kFirstGrace)});
  }
  Daemon daemon(args);
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());

  test_support::BackgroundDispatch long_job(
      daemon.address(), ExecRequest({"sleep", "100"}), kTimeout);
  test_support::BackgroundDispatch short_job(
      daemon.address(), ExecRequest({"sleep", "1.5"}), kTimeout);
  const TimePoint short_started = Now();

  TimePoint first_at;
  std::optional<std::thread> first_stop;
  if (row.first == First::kLifetime) {
    ASSERT_TRUE(daemon.WaitForLog("\"exit_reason\":\"max lifetime\""));
    first_at = Now();
  } else {
    first_at = Now();
    first_stop.emplace([&] {
      EXPECT_TRUE(
          (*connection)->Stop(ToDuration(Seconds(kFirstGrace)), kTimeout).ok());
    });
    ASSERT_TRUE(WaitFor([&] {
      auto health = (*connection)->Health(seconds(5));
      return health.ok() &&
             *health == WorkerConnection::ServingStatus::kNotServing;
    }));
  }
  std::optional<std::thread> second_stop;
  const TimePoint second_at = Now();
  double second_grace = 0;
  switch (row.second) {
    case Second::kSigterm0:
    case Second::kSigterm2:
      second_grace = signal_grace;
      ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
      break;
    case Second::kStopShorter:
    case Second::kStopLonger:
      second_grace = row.second == Second::kStopShorter ? 3 : 300;
      second_stop.emplace([&, second_grace] {
        EXPECT_TRUE((*connection)
                        ->Stop(ToDuration(Seconds(second_grace)), kTimeout)
                        .ok());
      });
      break;
  }

  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
  const double ended = Since(first_at);
  const double first_deadline = kFirstGrace;
  const double second_deadline = ToSeconds(second_at - first_at) + second_grace;
  const bool second_wins = second_deadline < first_deadline;
  const double expected = std::min(first_deadline, second_deadline);
  // Not before the deadline, and after it by less than half the smallest
  // gap between the two deadlines of any row (3 s): the exit, LSan's leak
  // check under ASan and a loaded machine take their share of that.
  EXPECT_GT(ended, expected - 0.5) << "first deadline " << first_deadline
                                   << " s, second " << second_deadline << " s";
  EXPECT_LT(ended, expected + 1.5) << "first deadline " << first_deadline
                                   << " s, second " << second_deadline << " s";

  // The short job (1.5 s) finishes by itself unless the deadline comes
  // before it does; the long one is cancelled at the deadline.
  const double short_end = ToSeconds(short_started - first_at) + 1.5;
  ASSERT_GT(std::abs(short_end - expected), 0.3) << "too close to call";
  const bool short_drains = short_end < expected;
  absl::StatusOr<JobOutcome> long_outcome = long_job.Outcome();
  ASSERT_TRUE(long_outcome.ok()) << long_outcome.status();
  EXPECT_EQ(long_outcome->failure, Failure::kCancelled);
  absl::StatusOr<JobOutcome> short_outcome = short_job.Outcome();
  ASSERT_TRUE(short_outcome.ok()) << short_outcome.status();
  if (short_drains) {
    EXPECT_EQ(*short_outcome, JobOutcome::Exited(0));
  } else {
    EXPECT_EQ(short_outcome->failure, Failure::kCancelled);
  }
  if (first_stop) first_stop->join();
  if (second_stop) second_stop->join();

  const nlohmann::json drain = JsonLine(daemon.log(), "drain_seconds");
  ASSERT_FALSE(drain.is_null()) << daemon.log();
  EXPECT_EQ(drain["cancelled"].get<int>(), short_drains ? 1 : 2) << drain;
  EXPECT_EQ(drain["drained"].get<int>(), short_drains ? 1 : 0) << drain;
  const std::string first_source =
      row.first == First::kLifetime ? "max lifetime" : "stop rpc";
  const std::string second_source =
      row.second == Second::kSigterm0 || row.second == Second::kSigterm2
          ? "SIGTERM"
          : "stop rpc";
  EXPECT_EQ(drain["deadline_source"],
            second_wins ? second_source : first_source)
      << drain;
  const std::string requests = drain["stop_requests"];
  EXPECT_THAT(requests, HasSubstr(first_source));
  EXPECT_THAT(requests, HasSubstr(second_source));
}

INSTANTIATE_TEST_SUITE_P(
    Daemon, ComposeDaemonTest,
    ::testing::Values(Row{First::kLifetime, Second::kSigterm0},
                      Row{First::kLifetime, Second::kSigterm2},
                      Row{First::kLifetime, Second::kStopShorter},
                      Row{First::kLifetime, Second::kStopLonger},
                      Row{First::kStopRpc, Second::kSigterm0},
                      Row{First::kStopRpc, Second::kSigterm2},
                      Row{First::kStopRpc, Second::kStopShorter},
                      Row{First::kStopRpc, Second::kStopLonger}),
    [](const auto& p) { return Name(p.param); });

// Count returns how many times `what` occurs in `text`.
size_t Count(const std::string& text, std::string_view what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != text.npos; ++at) ++n;
  return n;
}

// 300 concurrent Stop(-1) calls while a job runs: every call waits for the
// one drain without a thread of its own, and all are answered when it ends.
// Their info lines are throttled (LogThrottle): one, and the count of the
// rest at exit.
TEST(StopFloodTest, ThreeHundredStopsCostNoThreadEachAndAreAllAnswered) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--log-format", "json",
                 "--log-level", "debug"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  const std::string address = daemon.address();
  auto connection = WorkerConnection::Open(address);
  ASSERT_TRUE(connection.ok());
  ASSERT_TRUE((*connection)->IdleTime(seconds(5)).ok());
  test_support::BackgroundDispatch job(daemon.address(),
                                       ExecRequest({"sleep", "4"}), kTimeout);
  const int64_t threads_before = StatusNumber(daemon.pid(), "Threads");
  const int64_t rss_before = StatusNumber(daemon.pid(), "VmRSS");

  // Ten calls per connection: each may hold max_concurrent_tasks +
  // kControlStreams streams at once (ServerLimits), more would queue.
  constexpr int kChannels = 30, kCallsPerChannel = 10;
  struct Call {
    grpc::ClientContext context;
    v1::StopReply reply;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::StopReply>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs;
  std::vector<std::unique_ptr<Call>> calls;
  v1::StopRequest request;
  request.set_grace_seconds(-1);
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("cfdb.test.channel", c);  // a channel of its own
    stubs.push_back(v1::Worker::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args)));
    for (int i = 0; i < kCallsPerChannel; ++i) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(std::chrono::system_clock::now() + kTimeout);
      call->reader = stubs.back()->AsyncStop(&call->context, request, &cq);
      call->reader->Finish(&call->reply, &call->status, call.get());
      calls.push_back(std::move(call));
    }
  }
  // All 300 are in: at debug, the daemon logs each one.
  ASSERT_TRUE(WaitFor([&] {
    return Count(daemon.log(), "waits for the drain") ==
           kChannels * kCallsPerChannel;
  }));
  const int64_t threads_during = StatusNumber(daemon.pid(), "Threads");
  const int64_t rss_during = StatusNumber(daemon.pid(), "VmRSS");
  std::cout << "daemon threads: " << threads_before << " before, "
            << threads_during << " with 300 Stop calls waiting; VmRSS "
            << rss_before << " -> " << rss_during << " kB\n";
  // The bound: gRPC's pollers and executors may add a few; a thread per
  // call would add 300.
  EXPECT_LE(threads_during, threads_before + 8);
  EXPECT_LT(rss_during - rss_before, 32 * 1024) << "kB";

  int answered = 0;
  void* tag = nullptr;
  bool ok = false;
  while (answered < kChannels * kCallsPerChannel && cq.Next(&tag, &ok)) {
    auto* call = static_cast<Call*>(tag);
    EXPECT_TRUE(ok);
    EXPECT_TRUE(call->status.ok()) << call->status.error_message();
    EXPECT_EQ(call->reply.drained(), 1u);
    ++answered;
  }
  EXPECT_EQ(answered, kChannels * kCallsPerChannel);
  absl::StatusOr<JobOutcome> outcome = job.Outcome();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0)) << "drained without limit";
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::string log = daemon.log();
  ASSERT_NE(log.find("drained in"), std::string::npos) << log;
  EXPECT_EQ(log.find("drained in"), log.rfind("drained in")) << "one drain";
  EXPECT_THAT(log, HasSubstr("stop rpc x300"));
  // At info, a handful of lines, and what they held back is counted.
  EXPECT_LE(Count(log, "stop rpc: draining"), 2u) << log;
  EXPECT_TRUE(std::regex_search(
      log, std::regex(R"(Stop call: \d+ more lines not logged|more like it)")))
      << log;
  EXPECT_THAT(log, HasSubstr("\"suppressed\":"));
  cq.Shutdown();
}

// A client reads two events of a chatty job and then stops reading; a Stop
// with grace 2 cancels the job. The client's outcome says the job started
// (never "retry", 75), and the worker exits within grace + the 5 s it gives
// open calls.
TEST(StalledReaderTest, IsNeverToldToRetryAndTheWorkerStillExits) {
  Daemon daemon(
      {"--idle-timeout-seconds", "0", "--task-kill-grace-seconds", "1"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  const std::string address = daemon.address();
  absl::Notification two_events, resume;
  absl::StatusOr<JobOutcome> outcome;
  std::thread reader([&] {
    auto connection = WorkerConnection::Open(address);
    int events = 0;
    DispatchCallbacks callbacks;
    callbacks.on_accepted = [&] { ++events; };
    callbacks.on_output = [&](OutputStream, std::string_view) {
      if (++events == 2) {
        two_events.Notify();
        resume.WaitForNotification();
      }
    };
    outcome =
        (*connection)->Dispatch(ExecRequest({"yes"}), callbacks, kTimeout);
  });
  ASSERT_TRUE(two_events.WaitForNotificationWithTimeout(absl::Seconds(30)));
  auto stopper = WorkerConnection::Open(address);
  const TimePoint stop_at = Now();
  absl::StatusOr<StopSummary> stopped = (*stopper)->Stop(seconds(2), kTimeout);
  EXPECT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_LT(Since(stop_at), 2 + 5 + 3.0 * test_support::kSanitizerSlowdown)
      << "grace + open-call wait + margin";
  resume.Notify();
  reader.join();
  if (outcome.ok()) {
    EXPECT_EQ(outcome->failure, Failure::kCancelled) << outcome->ToString();
    EXPECT_EQ(outcome->ShellStatus(), 125);
  } else {
    const ErrorKind kind = ClassifyError(Rpc::kDispatch, outcome.status());
    EXPECT_NE(ExitCodeFor(kind), 75) << outcome.status();
    EXPECT_EQ(kind, ErrorKind::kOutcomeUnknown) << outcome.status();
  }
}

// LiveProcesses returns the processes (zombies left out) whose process
// group is one of `groups`.
std::vector<pid_t> LiveProcesses(const std::vector<pid_t>& groups) {
  std::vector<pid_t> live;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat = test_support::ProcFile(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (state == "Z") continue;
    for (pid_t group : groups) {
      if (pgrp == group) live.push_back(pid);
    }
  }
  return live;
}

// SIGKILL to a daemon running a `sleep 100` and a job that ignores SIGTERM
// and has a child of its own: nothing of either job is left soon after
// (10 s allowed; the jobs would live 100 s).
TEST(HardDeathTest, JobsDieWithAWorkerKilledOutright) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--max-concurrent-tasks", "2"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  test_support::BackgroundDispatch sleeper(
      daemon.address(), ExecRequest({"sleep", "100"}), kTimeout);
  test_support::BackgroundDispatch stubborn(
      daemon.address(),
      ExecRequest({"sh", "-c", "trap '' TERM; sleep 101; echo never"}),
      kTimeout);
  std::vector<pid_t> groups;
  ASSERT_TRUE(WaitFor([&] {
    groups = test_support::JobChildren(daemon.pid());
    return groups.size() == 2 && LiveProcesses(groups).size() == 3;
  })) << "two programs and the stubborn one's sleep";
  ASSERT_EQ(kill(daemon.pid(), SIGKILL), 0);
  const TimePoint killed = Now();
  EXPECT_TRUE(
      WaitFor([&] { return LiveProcesses(groups).empty(); }, seconds(10)))
      << LiveProcesses(groups).size() << " processes of the jobs left";
  std::cout << "jobs gone " << Since(killed) << " s after SIGKILL\n";
  daemon.Wait();
}

// Rounds of parallel dispatches timed around the worker's idle retirement:
// each either ran to its end or got a transient outcome (retry elsewhere);
// none was told "do not retry" without having been accepted.
TEST(RetirementRaceTest, EveryDispatchRanOrMayBeRetried) {
  constexpr int kRounds = 10, kDispatches = 48;
  std::mt19937 random(12345);
  int ran = 0, transient = 0;
  for (int round = 0; round < kRounds; ++round) {
    Daemon daemon({"--idle-timeout-seconds", "1",
                   "--idle-poll-interval-seconds", "0.25"});
    ASSERT_GT(daemon.port(), 0) << daemon.log();
    const std::string address = daemon.address();
    // The worker became idle when its docket was made, at its start;
    // retirement comes about 1 s later, within a poll interval (0.25 s).
    // That start is read from the worker (Now less its idle seconds), not
    // taken as the moment it listens: a sanitizer build takes long enough to
    // get from one to the other that every dispatch came after retirement.
    auto probe = WorkerConnection::Open(address);
    ASSERT_TRUE(probe.ok()) << probe.status();
    const absl::StatusOr<double> idle = (*probe)->IdleTime(kTimeout);
    ASSERT_TRUE(idle.ok()) << idle.status();
    const TimePoint start = Now() - std::chrono::duration_cast<Duration>(
                                        std::chrono::duration<double>(*idle));
    std::vector<std::thread> threads;
    std::vector<absl::StatusOr<JobOutcome>> outcomes(kDispatches);
    for (int i = 0; i < kDispatches; ++i) {
      const auto offset = milliseconds(950 + random() % 350);
      threads.emplace_back([&, i, offset] {
        auto connection = WorkerConnection::Open(address);
        std::this_thread::sleep_until(start + offset);
        outcomes[i] =
            (*connection)->Dispatch(ExecRequest({"true"}), {}, kTimeout);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kDispatches; ++i) {
      if (outcomes[i].ok()) {
        EXPECT_EQ(*outcomes[i], JobOutcome::Exited(0));
        ++ran;
        continue;
      }
      const ErrorKind kind =
          ClassifyError(Rpc::kDispatch, outcomes[i].status());
      if (Accepted(outcomes[i].status())) {
        ADD_FAILURE() << "an accepted `true` was not run to its end: "
                      << outcomes[i].status();
      } else {
        EXPECT_TRUE(IsTransient(kind))
            << "round " << round
            << ": refused as not retryable: " << outcomes[i].status();
        ++transient;
      }
    }
    EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  }
  std::cout << ran << " dispatches ran, " << transient
            << " were told to retry elsewhere\n";
  EXPECT_GT(ran, 0);
  EXPECT_GT(transient, 0) << "the rounds straddled the retirement";
}

}  // namespace
}  // namespace cfdb::worker

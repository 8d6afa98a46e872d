// What a hostile or broken client can do to the daemon (issue 13): forge or
// flood its log, change an error's code with a long field, send bytes that
// are no request, exhaust its descriptors, abuse HTTP/2 on one connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "serve/retirement.h"
#include "support/background_dispatch.h"
#include "support/daemon.h"
#include "support/proc_util.h"
#include "support/raw_call.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::CallRaw;
using test_support::CollectingJob;
using test_support::Daemon;
using test_support::ExecRequest;
using test_support::HeapLikeProduction;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kForged[] =
    "x\nFORGED job nightly-backup: exited with code 0\x1b[31m\r";

// Lines returns the log's lines.
std::vector<std::string> Lines(const std::string& log) {
  return absl::StrSplit(log, '\n', absl::SkipEmpty());
}

// ExpectOneEventPerLine checks that no client text made a line of its own,
// carried a terminal escape or made a line longer than a few KiB.
void ExpectOneEventPerLine(const std::string& log, bool json) {
  EXPECT_THAT(log, Not(HasSubstr("\x1b"))) << "no terminal escape";
  EXPECT_THAT(log, Not(HasSubstr("[libprotobuf")));
  for (const std::string& line : Lines(log)) {
    EXPECT_LT(line.size(), 4096u) << line.substr(0, 200);
    if (json) {
      EXPECT_TRUE(nlohmann::json::accept(line)) << line.substr(0, 200);
    } else {
      EXPECT_TRUE(std::regex_search(line, std::regex(R"(^\d{4}-\d\d-\d\dT)")))
          << "a line that is not an event: " << line.substr(0, 200);
    }
  }
}

// A field a client controls, and a request carrying `text` in it.
struct Field {
  const char* name;
  JobRequest (*request)(const std::string& text);
};

const Field kFields[] = {
    {"JobId",
     [](const std::string& t) {
       JobRequest r = ExecRequest({"true"});
       r.job_id = t;
       return r;
     }},
    {"Kind",
     [](const std::string& t) {
       JobRequest r = ExecRequest({"true"});
       r.kind = t;
       return r;
     }},
    {"EnvName",
     [](const std::string& t) {
       JobRequest r = ExecRequest({"true"});
       MutableExec(r).env["A=" + t] = "1";
       return r;
     }},
    {"Argv0",
     [](const std::string& t) { return ExecRequest({"/nonexistent/" + t}); }},
    {"Cwd",
     [](const std::string& t) {
       JobRequest r = ExecRequest({"true"});
       MutableExec(r).cwd = "/nonexistent/" + t;
       return r;
     }},
};

struct Injection {
  Field field;
  bool json;
  bool huge;  // 20 MB of text instead of a forged line
};

void PrintTo(const Injection& i, std::ostream* os) {
  *os << i.field.name << (i.json ? " json" : " text")
      << (i.huge ? " huge" : "");
}

class LogInjectionTest : public ::testing::TestWithParam<Injection> {};

// Every client field that can reach a log line or a status message, in
// both formats: one line per event, escaped, truncated; the call refused
// with INVALID_ARGUMENT (or failed to start) and a short message.
TEST_P(LogInjectionTest, ClientTextNeitherForgesNorFloodsTheLog) {
  const Injection& p = GetParam();
  Daemon daemon({"--idle-timeout-seconds", "0", "--log-format",
                 p.json ? "json" : "text"});
  ASSERT_GT(daemon.port(), 0);
  const std::string text =
      p.huge ? std::string(20'000'000, 'a') : std::string(kForged);
  auto connection = WorkerConnection::Open(daemon.address());
  absl::StatusOr<JobOutcome> outcome =
      (*connection)->Dispatch(p.field.request(text), {}, seconds(30));
  const std::string message =
      outcome.ok() ? outcome->ToString() : outcome.status().ToString();
  if (outcome.ok()) {
    EXPECT_EQ(outcome->failure, JobOutcome::Failure::kStartFailed) << message;
  } else {
    EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument)
        << message.substr(0, 300);
  }
  EXPECT_LT(message.size(), 1000u) << "a truncated echo";
  EXPECT_THAT(message, Not(HasSubstr("\n")));
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::string log = daemon.log();
  ExpectOneEventPerLine(log, p.json);
  if (!p.huge) {
    // The event is there, its text escaped; huge ones may not be echoed.
    EXPECT_THAT(log, HasSubstr("FORGED job nightly-backup")) << log;
  }
}

std::vector<Injection> AllInjections() {
  std::vector<Injection> all;
  for (const Field& f : kFields) {
    for (bool json : {false, true}) all.push_back({f, json, false});
  }
  for (const Field& f : kFields) all.push_back({f, false, true});
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, LogInjectionTest, ::testing::ValuesIn(AllInjections()),
    [](const ::testing::TestParamInfo<Injection>& param_info) {
      return absl::StrCat(param_info.param.field.name,
                          param_info.param.json ? "Json" : "Text",
                          param_info.param.huge ? "Huge" : "Forged");
    });

// Bytes that are no request are INVALID_ARGUMENT, never UNIMPLEMENTED (on
// Idle: "the worker predates this RPC"), and protobuf's complaint is one of
// our JSON lines.
TEST(HostileClientTest, BytesThatAreNoRequestAreInvalidArgument) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--log-format", "json"});
  const std::string not_utf8 = std::string("\x0a\x02\xff\xfe", 4);
  const grpc::Status dispatch =
      CallRaw(daemon.address(), "/cfdb.worker.v1.Worker/Dispatch", not_utf8);
  EXPECT_EQ(dispatch.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << dispatch.error_message();
  const grpc::Status idle =
      CallRaw(daemon.address(), "/cfdb.worker.v1.Worker/Idle", "\xff\xff\xff");
  EXPECT_EQ(idle.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(
      ClassifyError(Rpc::kIdle, absl::Status(absl::StatusCode::kInvalidArgument,
                                             idle.error_message())),
      ErrorKind::kIdleUnavailable);
  const grpc::Status health =
      CallRaw(daemon.address(), "/grpc.health.v1.Health/Check", "\xff");
  EXPECT_EQ(health.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  ExpectOneEventPerLine(daemon.log(), /*json=*/true);
  EXPECT_THAT(daemon.log(), HasSubstr("\"source\":\"protobuf\""));
}

// A 10,000-byte kind or env name is INVALID_ARGUMENT with a truncated
// message: never RESOURCE_EXHAUSTED over gRPC's metadata limit.
TEST(HostileClientTest, ALongFieldStaysInvalidArgument) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  auto connection = WorkerConnection::Open(daemon.address());
  const std::string long_text(10'000, 'k');
  for (const Field* field : {&kFields[1], &kFields[2]}) {
    absl::StatusOr<JobOutcome> outcome =
        (*connection)->Dispatch(field->request(long_text), {}, seconds(10));
    ASSERT_FALSE(outcome.ok()) << field->name;
    EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument)
        << field->name << ": " << outcome.status().ToString().substr(0, 300);
    EXPECT_LT(outcome.status().message().size(), 600u);
    EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("bytes)"))
        << "says how long the original was";
  }
}

// Retrying clients of a full docket make a bounded number of log lines.
TEST(HostileClientTest, ADocketFullFloodIsLoggedWithACount) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--max-concurrent-tasks", "1"});
  auto connection = WorkerConnection::Open(daemon.address());
  // Busy until the flood is over, however slow the machine (a 3 s job
  // ended under the flood of an ASan build at ctest -j6): then cancelled.
  JobRequest busy_request = ExecRequest({"sleep", "120"});
  busy_request.job_id = "busy";
  test_support::BackgroundDispatch busy(daemon.address(), busy_request,
                                        seconds(150));
  int refused = 0;
  for (int i = 0; i < 500; ++i) {
    JobRequest r = ExecRequest({"true"});
    r.job_id = absl::StrCat("flood-", i);
    refused += absl::IsResourceExhausted(
        (*connection)->Dispatch(r, {}, seconds(5)).status());
  }
  EXPECT_TRUE((*connection)->Cancel("busy", seconds(0), seconds(30)).ok());
  (void)busy.Outcome();
  EXPECT_EQ(refused, 500);
  const std::string log = daemon.log();
  size_t lines = 0;
  for (const std::string& line : Lines(log))
    lines += line.find("refused") != line.npos;
  EXPECT_LE(lines, 2u) << log;
  EXPECT_GE(lines, 1u);
}

// RssKib is the resident size of `pid` in KiB.
int64_t RssKib(pid_t pid) { return test_support::StatusNumber(pid, "VmRSS"); }

// The documented bound of docs/SECURITY.md ("Limits"): one abusive
// connection leaves the worker under this much above its baseline.
constexpr int64_t kAbuseBoundKib = 256 * 1024;
// After the connection is gone, memory goes back to within this.
constexpr int64_t kSettledKib = 48 * 1024;

// What a flood on one connection must not do is make the worker's own calls
// to itself fail: so Idle and health are held to the tightest deadline the
// worker puts on them, the listener check's (3 s; the self-poll and ECS's
// health check allow 5 s), stretched as every bound is under sanitizers. A
// figure is not the bound: the slowest Idle + health of a rapid-reset flood,
// 12 runs each on an idle 2-core machine, was 0.15-0.26 s in the production
// build and 1.5-2.9 s under ASan (whose allocator then takes about half of
// the worker's CPU, perf), and 1.03 s in CI's production build beside two
// other tests at once, which a 1 s bound failed.
constexpr Duration kFloodAnswerBound =
    kListenerCheckDeadline * test_support::kSanitizerSlowdown;

class StreamAbuseTest
    : public ::testing::TestWithParam<std::vector<std::string>> {};

// One connection of a raw HTTP/2 client (tests/serve/h2_abuse.py): the
// worker stays under the bound, answers Idle and health within
// kFloodAnswerBound all the while, and its memory goes back near the baseline
// afterwards.
TEST_P(StreamAbuseTest, TheWorkerStaysBoundedAndAnswers) {
  Daemon daemon({"--idle-timeout-seconds", "0"}, HeapLikeProduction());
  ASSERT_GT(daemon.pid(), 0);
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE((*connection)->IdleTime(seconds(5)).ok());
  const int64_t baseline = RssKib(daemon.pid());
  std::vector<std::string> argv = {"/usr/bin/python3", CFDB_H2_ABUSE_SCRIPT,
                                   "127.0.0.1", std::to_string(daemon.port())};
  argv.insert(argv.end(), GetParam().begin(), GetParam().end());
  CollectingJob abuse(ExecRequest(argv));
  std::atomic<bool> done{false};
  std::thread attacker([&] {
    RunExec(abuse);
    done = true;
  });
  int64_t peak = baseline;
  int calls = 0;
  std::vector<std::string> slow;
  const Duration bound = kFloodAnswerBound;
  Duration slowest{};
  while (!done) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status idle = (*connection)->IdleTime(bound).status();
    absl::Status health = (*connection)->Health(bound).status();
    slowest =
        std::max<Duration>(slowest, std::chrono::steady_clock::now() - start);
    ++calls;
    if (!idle.ok() || !health.ok()) {
      slow.push_back(absl::StrCat(idle.ToString(), " / ", health.ToString()));
    }
    peak = std::max(peak, RssKib(daemon.pid()));
    std::this_thread::sleep_until(start + milliseconds(100));
  }
  attacker.join();
  EXPECT_THAT(abuse.err(), Not(HasSubstr("Traceback"))) << abuse.err();
  EXPECT_GE(calls, 1);
  EXPECT_THAT(slow, ::testing::IsEmpty())
      << "Idle and health each within " << ToSeconds(bound) << " s";
  std::cout << "slowest Idle + health: " << ToSeconds(slowest) << " s\n";
  // Each is cut: past the stream limit (streams, partial), or by the
  // rapid-reset guard; but a client that never acknowledges SETTINGS is not
  // held to the limit (docs/SECURITY.md), and its streams are bounded only
  // by their number here.
  EXPECT_THAT(abuse.out(), HasSubstr(absl::StrCat(
                               "closed by server: ",
                               GetParam()[0] == "unacked" ? "False" : "True")));
  if (GetParam()[0] == "reset") {
    EXPECT_THAT(daemon.log(),
                HasSubstr("the rapid-reset pattern): connection cut"));
  }
  EXPECT_LT(peak - baseline, kAbuseBoundKib) << abuse.out();
  EXPECT_TRUE(test_support::WaitFor(
      [&] { return RssKib(daemon.pid()) - baseline < kSettledKib; },
      seconds(15)))
      << "baseline " << baseline << " KiB, now " << RssKib(daemon.pid());
}

INSTANTIATE_TEST_SUITE_P(
    Modes, StreamAbuseTest,
    ::testing::Values(std::vector<std::string>{"streams", "40000", "3"},
                      std::vector<std::string>{"unacked", "2000", "3"},
                      std::vector<std::string>{"partial", "200", "2000000",
                                               "3"},
                      std::vector<std::string>{"reset", "5"}),
    [](const ::testing::TestParamInfo<std::vector<std::string>>& param_info) {
      return param_info.param[0];
    });

// What a rapid-reset attacker who comes back after every cut gets, for 8 s:
// few streams on each connection before it is cut, and the worker within
// its bound. The guard counts late (abuse_guard.h); this holds what it does
// after the cut. When it only shut the socket down, gRPC read on what was
// queued: a median of 26,200-29,200 streams per connection in 4 runs, of
// 4,600-6,800 since (docs/SECURITY.md). Peak RSS is held to the documented
// bound only: +127-153 MiB then, +76-119 MiB now, too close to tell apart.
TEST(HostileClientTest, ARapidResetAttackerIsCutEarlyOnEachConnection) {
  // ASan slows the handlers that count, not the client that floods: its
  // count before the cut was 4x production's in its first CI run (median
  // 49,800), the stretch StreamAbuseTest measured for floods (10x) holds it.
  constexpr int64_t kMedianBound =
      12000 * (test_support::kSanitizerSlowdown > 1 ? 10 : 1);
  Daemon daemon({"--idle-timeout-seconds", "0"}, HeapLikeProduction());
  ASSERT_GT(daemon.pid(), 0);
  const int64_t baseline = RssKib(daemon.pid());
  CollectingJob abuse(
      ExecRequest({"/usr/bin/python3", CFDB_H2_ABUSE_SCRIPT, "127.0.0.1",
                   std::to_string(daemon.port()), "resets", "8"}));
  std::atomic<bool> done{false};
  std::thread attacker([&] {
    RunExec(abuse);
    done = true;
  });
  int64_t peak = baseline;
  while (!done) {
    peak = std::max(peak, RssKib(daemon.pid()));
    std::this_thread::sleep_for(milliseconds(20));
  }
  attacker.join();
  std::cout << abuse.out() << "peak: +" << (peak - baseline) / 1024 << " MiB\n";
  EXPECT_THAT(abuse.err(), Not(HasSubstr("Traceback"))) << abuse.err();
  std::smatch cut;
  const std::string out = abuse.out();
  ASSERT_TRUE(std::regex_search(
      out, cut, std::regex(R"(before a cut: median (\d+), at most (\d+))")))
      << out;
  EXPECT_LT(std::stoll(cut[1].str()), kMedianBound) << out;
  EXPECT_LT(peak - baseline, kAbuseBoundKib) << out;
}

// A rapid-reset attacker who comes back after every cut, for 10 s: a
// handful of lines (LogThrottle), the count of the rest by the exit, and
// the worker still serves.
TEST(HostileClientTest, AnAttackerWhoComesBackMakesAHandfulOfLines) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  ASSERT_GT(daemon.port(), 0);
  CollectingJob abuse(
      ExecRequest({"/usr/bin/python3", CFDB_H2_ABUSE_SCRIPT, "127.0.0.1",
                   std::to_string(daemon.port()), "resets", "10"}));
  RunExec(abuse);
  std::cout << abuse.out();
  EXPECT_THAT(abuse.err(), Not(HasSubstr("Traceback"))) << abuse.err();
  auto connection = WorkerConnection::Open(daemon.address());
  EXPECT_TRUE((*connection)->IdleTime(seconds(5)).ok());
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::string log = daemon.log();
  size_t lines = 0;
  for (const std::string& line : Lines(log))
    lines += line.find("rapid-reset pattern") != line.npos;
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 3u) << log;
  EXPECT_TRUE(std::regex_search(
      log,
      std::regex(R"re((more like it since the last|more lines not logged))re"
                 R"re(.*suppressed=[1-9])re")))
      << log;
}

// Descriptors run out once (more connections held than the limit, 64:64)
// in three configurations: idle polling off, the defaults, and a poll
// interval longer than the listener check. Either new clients are served
// again within 20 s, or the worker says its listener is lost, turns
// NOT_SERVING and exits 1 within the documented bound (ListenerLostBound:
// 26 s at the defaults, counted here from the release). It never lives on
// unreachable.
class DescriptorExhaustionTest
    : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(DescriptorExhaustionTest, NeverLeavesTheWorkerUnreachable) {
  constexpr auto kBound = seconds(26);  // ListenerLostBound at the defaults
  std::vector<std::string> args = GetParam();
  args.insert(args.end(), {"--log-level", "debug"});
  Daemon daemon(args, {"prlimit", "--nofile=64:64"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(daemon.port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> held;
  for (int i = 0; i < 84; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) ==
        0) {
      held.push_back(fd);
    } else {
      close(fd);
    }
  }
  std::this_thread::sleep_for(seconds(3));
  for (const int fd : held) close(fd);
  const auto released = std::chrono::steady_clock::now();
  auto stopped = [&] {
    return daemon.log().find(" stopped") != std::string::npos;
  };
  bool served = false;
  while (!served && !stopped() &&
         std::chrono::steady_clock::now() < released + seconds(20)) {
    auto fresh = WorkerConnection::Open(
        daemon.address(), Credentials::Insecure(), {.own_connection = true});
    served = (*fresh)->IdleTime(seconds(1)).ok();
    if (!served) std::this_thread::sleep_for(milliseconds(200));
  }
  if (served) {
    std::cout << "new clients are served again\n";
    return;
  }
  // Not served: the worker must have seen it and left, within the bound.
  EXPECT_TRUE(test_support::WaitFor(
      stopped,
      released + kBound + seconds(3) - std::chrono::steady_clock::now()))
      << daemon.log();
  std::cout << "listener lost; the worker left "
            << ToSeconds(std::chrono::steady_clock::now() - released)
            << " s after the release\n";
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(1)) << daemon.log();
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: listener lost"));
  EXPECT_THAT(daemon.log(), HasSubstr("Failed accept4"));
}

INSTANTIATE_TEST_SUITE_P(
    Settings, DescriptorExhaustionTest,
    ::testing::Values(std::vector<std::string>{"--idle-timeout-seconds", "0"},
                      std::vector<std::string>{},
                      std::vector<std::string>{"--idle-poll-interval-seconds",
                                               "60"}),
    [](const ::testing::TestParamInfo<std::vector<std::string>>& p) {
      return p.param.empty()                          ? std::string("Defaults")
             : p.param[0] == "--idle-timeout-seconds" ? "IdlePollingOff"
                                                      : "PollEvery60s";
    });

}  // namespace
}  // namespace cfdb::worker

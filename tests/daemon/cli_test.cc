// The cfdb-worker binary, run as a user would run it.
#include <chrono>
#include <csignal>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/daemon.h"
#include "support/test_job.h"

namespace cfdb::worker {
namespace {

using testing::CollectingJob;
using testing::Command;
using testing::Daemon;
using ::testing::HasSubstr;

TEST(CliTest, RetiresItselfWhenIdleAndSaysWhy) {
  Daemon daemon(
      {"--idle-timeout-seconds", "1", "--idle-poll-interval-seconds", "0.2"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: idle for"));
}

TEST(CliTest, SigtermStopsTheDaemonWithExitZero) {
  Daemon daemon({});
  ASSERT_GT(daemon.pid(), 0);
  kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: signal"));
}

TEST(CliTest, DispatchIdleAndStopFromTheCommandLine) {
  Daemon daemon({});
  const std::string address = absl::StrCat("127.0.0.1:", daemon.port());
  JobRequest dispatch = Command({"dispatch", "--address", address, "--", "sh",
                                 "-c", "cat; echo err >&2; exit 7"});
  MutableExec(dispatch).stdin_data = "hello";
  CollectingJob client(dispatch);
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(7));
  EXPECT_EQ(client.out(), "hello");
  EXPECT_EQ(client.err(), "err\n");

  CollectingJob idle(Command({"idle", "--address", address}));
  EXPECT_EQ(RunExec(idle), JobOutcome::Exited(0));
  EXPECT_THAT(idle.out(), ::testing::MatchesRegex("[0-9]+\\.[0-9]{3}\n"));

  CollectingJob stop(Command({"stop", "--address", address, "--grace", "5"}));
  EXPECT_EQ(RunExec(stop), JobOutcome::Exited(0));
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: stop rpc"));

  CollectingJob late(Command({"idle", "--address", address}));
  EXPECT_EQ(RunExec(late), JobOutcome::Exited(75)) << "transient: it is gone";
  EXPECT_THAT(late.err(), HasSubstr("transient error (UNAVAILABLE)"));
}

TEST(CliTest, SecondSignalCancelsTheDrain) {
  Daemon daemon({"--signal-grace-seconds", "-1"});
  auto connection =
      WorkerConnection::Open(absl::StrCat("127.0.0.1:", daemon.port()));
  ASSERT_TRUE(connection.ok());
  absl::Notification accepted;
  absl::StatusOr<JobOutcome> outcome;
  std::thread client([&] {
    outcome = (*connection)
                  ->Dispatch(testing::ExecRequest({"sleep", "300"}),
                             {.on_accepted = [&] { accepted.Notify(); }});
  });
  ASSERT_TRUE(accepted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  kill(daemon.pid(), SIGTERM);
  // The first signal starts a drain without limit; the job keeps running.
  ASSERT_TRUE(daemon.WaitForLog("exiting: signal; draining without limit"));
  kill(daemon.pid(), SIGTERM);
  client.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, JobOutcome::Failure::kCancelled);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("cancelling what is left"));
}

TEST(CliTest, ClientRetriesTransientErrorsUpToItsAttempts) {
  Daemon daemon({});
  const std::string address = absl::StrCat("127.0.0.1:", daemon.port());
  CollectingJob stop(Command({"stop", "--address", address}));
  ASSERT_EQ(RunExec(stop), JobOutcome::Exited(0));
  daemon.Wait();
  CollectingJob idle(
      Command({"idle", "--address", address, "--attempts", "3"}));
  EXPECT_EQ(RunExec(idle), JobOutcome::Exited(75));
  EXPECT_THAT(idle.err(), HasSubstr("attempt 1 of 3 failed"));
  EXPECT_THAT(idle.err(), HasSubstr("attempt 2 of 3 failed"));
  EXPECT_THAT(idle.err(), ::testing::Not(HasSubstr("attempt 3 of 3 failed")));
}

TEST(CliTest, HealthExitsZeroOnlyWhenServing) {
  Daemon daemon({});
  const std::string address = absl::StrCat("127.0.0.1:", daemon.port());
  CollectingJob health(Command({"health", "--address", address}));
  EXPECT_EQ(RunExec(health), JobOutcome::Exited(0));
  EXPECT_EQ(health.out(), "SERVING\n");
  // gRPC's health convention: by service name too, NOT_FOUND for others.
  CollectingJob by_name(Command(
      {"health", "--address", address, "--service", "cfdb.worker.v1.Worker"}));
  EXPECT_EQ(RunExec(by_name), JobOutcome::Exited(0)) << by_name.err();
  EXPECT_EQ(by_name.out(), "SERVING\n");
  CollectingJob unknown(Command(
      {"health", "--address", address, "--service", "no.such.Service"}));
  EXPECT_EQ(RunExec(unknown), JobOutcome::Exited(76));
  EXPECT_THAT(unknown.err(), HasSubstr("NOT_FOUND"));
  CollectingJob stop(Command({"stop", "--address", address}));
  ASSERT_EQ(RunExec(stop), JobOutcome::Exited(0));
  daemon.Wait();
  CollectingJob gone(Command({"health", "--address", address}));
  EXPECT_EQ(RunExec(gone), JobOutcome::Exited(75));
}

TEST(CliTest, JsonLogsAreOneObjectPerLineWithTheExitFields) {
  Daemon daemon({"--log-format", "json", "--idle-timeout-seconds", "1",
                 "--idle-poll-interval-seconds", "0.2"});
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  std::istringstream lines(daemon.log());
  int objects = 0;
  bool saw_exit = false;
  for (std::string line; std::getline(lines, line);) {
    const auto json = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(json.is_object()) << line;
    EXPECT_TRUE(json.contains("time") && json.contains("level") &&
                json.contains("message"))
        << line;
    ++objects;
    if (json.value("exit_reason", "") == "idle") {
      saw_exit = true;
      EXPECT_GE(json["idle_seconds"].get<double>(), 1.0);
      EXPECT_EQ(json["idle_timeout_seconds"].get<double>(), 1.0);
      EXPECT_EQ(json["level"], "info");
    }
  }
  EXPECT_GE(objects, 2);
  EXPECT_TRUE(saw_exit) << daemon.log();
}

// A staggered lifetime: the jitter drawn at start is logged, and the worker
// retires at the max lifetime less that, not at the max lifetime.
TEST(CliTest, TheLifetimeJitterIsLoggedAndKept) {
  Daemon daemon({"--log-format", "json", "--idle-timeout-seconds", "0",
                 "--max-lifetime-seconds", "4", "--max-lifetime-jitter-seconds",
                 "3"});
  const auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::optional<double> drawn, lifetime, retired_at;
  std::istringstream lines(daemon.log());
  for (std::string line; std::getline(lines, line);) {
    const auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.contains("max_lifetime_jitter_seconds")) {
      drawn = json["max_lifetime_jitter_seconds"].get<double>();
      lifetime = json["lifetime_seconds"].get<double>();
      EXPECT_EQ(json["max_lifetime_seconds"].get<double>(), 4.0);
    }
    if (json.value("exit_reason", "") == "max lifetime") {
      retired_at = json["lifetime_seconds"].get<double>();
      EXPECT_EQ(json["max_lifetime_seconds"].get<double>(), 4.0);
    }
  }
  ASSERT_TRUE(drawn && lifetime && retired_at) << daemon.log();
  EXPECT_GE(*drawn, 0.0);
  EXPECT_LE(*drawn, 3.0);
  EXPECT_DOUBLE_EQ(*lifetime, 4.0 - *drawn);
  EXPECT_DOUBLE_EQ(*retired_at, *lifetime);
  EXPECT_LT(elapsed, *lifetime + 1.0) << "retired at its own lifetime";
  EXPECT_GT(elapsed, *lifetime - 0.5);
}

TEST(CliTest, DispatchExitsWith128PlusTheSignal) {
  Daemon daemon({});
  CollectingJob client(Command(
      {"dispatch", "--address", absl::StrCat("127.0.0.1:", daemon.port()),
       "--no-stdin", "--", "sh", "-c", "kill -TERM $$"}));
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(128 + SIGTERM));
}

// --timeout passing after the job was accepted says the job started: never
// "retry" (75).
TEST(CliTest, TimeoutAfterAcceptanceSaysTheJobStarted) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  CollectingJob client(
      Command({"dispatch", "--address",
               absl::StrCat("127.0.0.1:", daemon.port()), "--timeout", "1",
               "--attempts", "3", "--no-stdin", "--", "sleep", "30"}));
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(73));
  EXPECT_THAT(client.err(), HasSubstr("accepted, deadline exceeded"));
  EXPECT_THAT(client.err(), HasSubstr("the worker cancels it"));
  EXPECT_THAT(client.err(), ::testing::Not(HasSubstr("attempt 1 of 3 failed")));
}

struct BadStart {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::string named;
};

void PrintTo(const BadStart& bad, std::ostream* os) {
  for (const auto& [name, value] : bad.env) *os << name << "=" << value << " ";
  for (const std::string& arg : bad.args) *os << arg << " ";
}

class BadStartTest : public ::testing::TestWithParam<BadStart> {};

TEST_P(BadStartTest, ExitsTwoNamingTheKnob) {
  CollectingJob job(Command(GetParam().args, GetParam().env));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(2));
  EXPECT_THAT(job.err(), HasSubstr(GetParam().named));
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadStartTest,
    ::testing::Values(
        BadStart{{"serve", "--idle-timeout-seconds", "soon"},
                 {},
                 "--idle-timeout-seconds"},
        BadStart{{"serve"},
                 {{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "-5"}},
                 "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"},
        BadStart{{"serve", "--idle-poll-interval-seconds", "0"},
                 {},
                 "--idle-poll-interval-seconds"},
        BadStart{
            {"serve"}, {{"CFDB_WORKER_PORT", "65536"}}, "CFDB_WORKER_PORT"},
        BadStart{{"serve", "--no-such-flag"}, {}, "--no-such-flag"},
        BadStart{{"dispatch", "--env", "NOEQUALS", "--", "true"}, {}, "--env"},
        // Plaintext only on loopback, by address, never by a name's prefix.
        BadStart{{"serve", "--host", "127.evil.example"}, {}, "not a loopback"},
        BadStart{{"serve", "--host", "127.0.0.1.nip.io"}, {}, "not a loopback"},
        BadStart{{"serve", "--host", "127.0.0.1 "}, {}, "not a loopback"},
        BadStart{
            {"serve", "--host", "localhost.example"}, {}, "not a loopback"},
        BadStart{{"serve", "--host", "0.0.0.0"}, {}, "not a loopback"},
        BadStart{{"serve"}, {{"CFDB_WORKER_HOST", "::"}}, "CFDB_WORKER_HOST"},
        // Admission needs client certificates.
        BadStart{{"serve", "--tls-admit-control", "api.cfdb.internal"},
                 {},
                 "--tls-admit-control"},
        BadStart{{"serve"},
                 {{"CFDB_WORKER_TLS_ADMIT_OBSERVE", "worker\x01"}},
                 "CFDB_WORKER_TLS_ADMIT_OBSERVE"}));

// Loopback literals (and localhost) serve plaintext.
TEST(CliTest, LoopbackHostsServePlaintext) {
  for (const char* host : {"127.0.0.1", "127.0.0.2", "localhost"}) {
    CollectingJob serve(Command({"serve", "--host", host, "--port", "0",
                                 "--max-lifetime-seconds", "0.2"}));
    EXPECT_EQ(RunExec(serve), JobOutcome::Exited(0)) << host << serve.err();
  }
}

TEST(CliTest, AnAddressOfAnotherHostSaysSo) {
  CollectingJob serve(
      Command({"serve", "--host", "192.0.2.1", "--allow-insecure",
               "--idle-timeout-seconds", "0"}));
  EXPECT_EQ(RunExec(serve), JobOutcome::Exited(1));
  EXPECT_THAT(serve.err(), HasSubstr("not an address of this host"));
}

// --version prints the version; a plain serve prints no gRPC internals.
TEST(CliTest, VersionAndAQuietStart) {
  CollectingJob version(Command({"--version"}));
  EXPECT_EQ(RunExec(version), JobOutcome::Exited(0));
  EXPECT_THAT(version.out(), ::testing::StartsWith("cfdb-worker "));
  Daemon daemon({"--idle-timeout-seconds", "0"});
  kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  for (const char* internal :
       {"source=grpc", "epoll fd", "Callback server", "TCP_USER_TIMEOUT"}) {
    EXPECT_THAT(daemon.log(), ::testing::Not(HasSubstr(internal)));
  }
  EXPECT_THAT(daemon.log(), HasSubstr("listening on")) << "our own lines stay";
}

TEST(CliTest, PortInUseIsARuntimeFailure) {
  Daemon first({});
  CollectingJob second(Command({"serve", "--port", std::to_string(first.port()),
                                "--idle-timeout-seconds", "0"}));
  EXPECT_EQ(RunExec(second), JobOutcome::Exited(1));
  EXPECT_THAT(second.err(), HasSubstr("cannot listen on"));
  EXPECT_THAT(second.err(), HasSubstr("the address is in use"));
}

}  // namespace
}  // namespace cfdb::worker

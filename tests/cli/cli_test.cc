// The cfdb-worker binary, run as a user would run it.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/background_dispatch.h"
#include "support/daemon.h"
#include "support/test_job.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using test_support::CollectingJob;
using test_support::Command;
using test_support::Daemon;
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
  const std::string address = daemon.address();
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
  test_support::BackgroundDispatch client(
      daemon.address(), test_support::ExecRequest({"sleep", "300"}));
  kill(daemon.pid(), SIGTERM);
  // The first signal starts a drain without limit; the job keeps running.
  ASSERT_TRUE(daemon.WaitForLog("exiting: signal; draining without limit"));
  kill(daemon.pid(), SIGTERM);
  const absl::StatusOr<JobOutcome> outcome = client.Outcome();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, JobOutcome::Failure::kCancelled);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("cancelling what is left"));
}

TEST(CliTest, ClientRetriesTransientErrorsUpToItsAttempts) {
  Daemon daemon({});
  const std::string address = daemon.address();
  CollectingJob stop(
      Command({"stop", "--address", address, "--grace-seconds", "0"}));
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
  const std::string address = daemon.address();
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
  CollectingJob stop(
      Command({"stop", "--address", address, "--grace-seconds", "0"}));
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
    if (json.value("exit_reason", "") == "max lifetime") {
      retired_at = json["max_lifetime_seconds"].get<double>();
      EXPECT_EQ(json["max_lifetime_configured_seconds"].get<double>(), 4.0);
      EXPECT_EQ(json["max_lifetime_jitter_seconds"], drawn.value_or(-1));
    } else if (json.contains("max_lifetime_jitter_seconds")) {
      drawn = json["max_lifetime_jitter_seconds"].get<double>();
      lifetime = json["max_lifetime_seconds"].get<double>();
      EXPECT_EQ(json["max_lifetime_configured_seconds"].get<double>(), 4.0);
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

// `--` ends the flags of every command, whatever flag comes last before
// it: dispatch's program and its argv, reap's addresses; and reap reads
// addresses from stdin for `-`.
TEST(CliTest, EverythingAfterDoubleDashIsTheCommandsArguments) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  const std::string address = daemon.address();
  CollectingJob env(Command({"dispatch", "--address", address, "--no-stdin",
                             "--env", "X=1", "--", "sh", "-c", "echo $X"}));
  EXPECT_EQ(RunExec(env), JobOutcome::Exited(0)) << env.err();
  EXPECT_EQ(env.out(), "1\n");
  CollectingJob two(
      Command({"dispatch", "--address", address, "--no-stdin", "--env", "X=1",
               "--env", "Y=2", "--", "ls", "--version"}));
  EXPECT_EQ(RunExec(two), JobOutcome::Exited(0)) << two.err();
  CollectingJob kept(Command({"reap", "--idle-threshold-seconds", "1000",
                              "--timeout", "5", "--", address}));
  EXPECT_EQ(RunExec(kept), JobOutcome::Exited(0)) << kept.err();
  EXPECT_THAT(kept.out(), HasSubstr("kept below threshold"));

  JobRequest from_stdin = Command(
      {"reap", "--idle-threshold-seconds", "0", "--grace-seconds", "5", "-"});
  MutableExec(from_stdin).stdin_data = address + "\n";
  CollectingJob reaped(from_stdin);
  EXPECT_EQ(RunExec(reaped), JobOutcome::Exited(0)) << reaped.err();
  EXPECT_THAT(reaped.out(), HasSubstr(address + " stopped"));
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
}

// A plaintext call to a worker that speaks TLS says so, and what to pass.
TEST(CliTest, APlaintextCallToATlsWorkerSaysItSpeaksTls) {
  test_support::TestPki pki;
  const test_support::Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert,
                 "--tls-key", worker.key, "--idle-timeout-seconds", "0"});
  CollectingJob idle(Command({"idle", "--address", daemon.address()}));
  EXPECT_EQ(RunExec(idle), JobOutcome::Exited(75));
  EXPECT_THAT(idle.err(), HasSubstr("handshake error (UNAVAILABLE): "));
  EXPECT_THAT(idle.err(),
              HasSubstr("; the worker at " + daemon.address() +
                        " speaks TLS: pass --tls-ca, --tls-cert and "
                        "--tls-key\n"));
  kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  // gRPC's error for each failed handshake (the call's, the probe's) is a
  // line a client causes: one, and the count of the rest at exit.
  const std::string log = daemon.log();
  EXPECT_EQ(log.find("Handshake failed"), log.rfind("Handshake failed")) << log;
  EXPECT_THAT(log, HasSubstr("more lines not logged (suppressed="));
  // Only a worker that answers TLS is said to speak it.
  CollectingJob gone(Command({"idle", "--address", daemon.address()}));
  EXPECT_EQ(RunExec(gone), JobOutcome::Exited(75));
  EXPECT_THAT(gone.err(), ::testing::Not(HasSubstr("speaks TLS")));
}

TEST(CliTest, DispatchExitsWith128PlusTheSignal) {
  Daemon daemon({});
  CollectingJob client(
      Command({"dispatch", "--address", daemon.address(), "--no-stdin", "--",
               "sh", "-c", "kill -TERM $$"}));
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(128 + SIGTERM));
}

// --timeout passing after the job was accepted says the job started: never
// "retry" (75). The caller's deadline is the job's: dispatch cancels it
// rather than leave it running detached for its grace.
TEST(CliTest, TimeoutAfterAcceptanceSaysTheJobStartedAndCancelsIt) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  const std::string address = daemon.address();
  CollectingJob client(Command({"dispatch", "--address", address, "--job-id",
                                "late", "--timeout", "1", "--attempts", "3",
                                "--no-stdin", "--", "sleep", "30"}));
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(73));
  EXPECT_THAT(client.err(), HasSubstr("accepted, deadline exceeded"));
  EXPECT_THAT(client.err(), HasSubstr("dispatch cancels it"));
  EXPECT_THAT(client.err(), ::testing::Not(HasSubstr("attempt 1 of 3 failed")));
  CollectingJob jobs(Command({"jobs", "--address", address}));
  EXPECT_EQ(RunExec(jobs), JobOutcome::Exited(0)) << jobs.err();
  EXPECT_THAT(jobs.out(), HasSubstr("late"));
  EXPECT_THAT(jobs.out(), ::testing::Not(HasSubstr("running")));
}

// dispatch --detach walks away once the job is accepted; another process
// attaches and gets its whole output and status (issue 35).
TEST(CliTest, DetachReturnsOnceAcceptedAndAnotherProcessAttaches) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  const std::string address = daemon.address();
  CollectingJob sent(
      Command({"dispatch", "--address", address, "--detach", "--format", "json",
               "--job-id", "walk", "--no-stdin", "--", "sh", "-c",
               "echo start; sleep 1; echo end; exit 7"}));
  EXPECT_EQ(RunExec(sent), JobOutcome::Exited(0)) << sent.err();
  EXPECT_EQ(sent.out(),
            "{\"job_id\":\"walk\",\"stdout_offset\":0,\"stderr_offset\":0}\n");
  CollectingJob attach(Command({"attach", "--address", address, "walk"}));
  EXPECT_EQ(RunExec(attach), JobOutcome::Exited(7)) << attach.err();
  EXPECT_EQ(attach.out(), "start\nend\n");
}

// status: a person's view of one worker, and the same as JSON; it names
// the job in flight and when the worker retires by which rule.
TEST(CliTest, StatusSaysWhatRunsAndWhenItRetires) {
  Daemon daemon({"--idle-timeout-seconds", "600"});
  const std::string address = daemon.address();
  CollectingJob idle(Command({"status", "--address", address}));
  EXPECT_EQ(RunExec(idle), JobOutcome::Exited(0)) << idle.err();
  EXPECT_THAT(idle.out(), HasSubstr("jobs      0 of "));
  EXPECT_THAT(idle.out(), HasSubstr("by the idle timeout"));
  EXPECT_THAT(idle.out(), HasSubstr("draining  no"));
  CollectingJob sent(
      Command({"dispatch", "--address", address, "--detach", "--job-id",
               "busy-1", "--no-stdin", "--", "sleep", "30"}));
  ASSERT_EQ(RunExec(sent), JobOutcome::Exited(0)) << sent.err();
  CollectingJob busy(
      Command({"status", "--address", address, "--format", "json"}));
  EXPECT_EQ(RunExec(busy), JobOutcome::Exited(0)) << busy.err();
  const nlohmann::json state = nlohmann::json::parse(busy.out());
  EXPECT_EQ(state["jobs_in_flight"], 1);
  EXPECT_EQ(state["job_ids"], nlohmann::json::array({"busy-1"}));
  EXPECT_EQ(state["idle_seconds"], 0);
  EXPECT_EQ(state["retirement_rule"], "max_lifetime") << "not idle: busy";
  EXPECT_GT(state["retires_at_unix_seconds"].get<double>(),
            static_cast<double>(time(nullptr)));
  EXPECT_EQ(state["draining"], false);
  CollectingJob version(Command({"--version"}));
  ASSERT_EQ(RunExec(version), JobOutcome::Exited(0));
  EXPECT_EQ(
      version.out(),
      absl::StrCat("cfdb-worker ", state["version"].get<std::string>(), "\n"));
  CollectingJob bad(Command({"status", "--address", address, "--format", "x"}));
  EXPECT_EQ(RunExec(bad), JobOutcome::Exited(2));
}

// status over a fleet: one line per worker as it answers, a failed one
// said as such (exit 1), JSON objects with --format json.
TEST(CliTest, StatusOverAFleetIsOneLinePerWorker) {
  Daemon first({"--idle-timeout-seconds", "0"});
  Daemon second({"--idle-timeout-seconds", "0"});
  const std::string dead = "127.0.0.1:1";
  CollectingJob table(
      Command({"status", first.address(), "--", second.address(), dead}));
  EXPECT_EQ(RunExec(table), JobOutcome::Exited(1)) << table.err();
  const std::string out = table.out();
  EXPECT_THAT(out, ::testing::StartsWith("ADDRESS "));
  for (const std::string& address : {first.address(), second.address()}) {
    EXPECT_TRUE(std::regex_search(
        out, std::regex(address + R"( +[0-9.]+ +0/[0-9]+ +no )")))
        << out;
  }
  EXPECT_THAT(out, HasSubstr(dead + "              transient error"));
  CollectingJob json(Command(
      {"status", "--format", "json", first.address(), second.address()}));
  EXPECT_EQ(RunExec(json), JobOutcome::Exited(0)) << json.err();
  int objects = 0;
  for (std::istringstream lines(json.out()); !lines.eof();) {
    std::string line;
    if (!std::getline(lines, line) || line.empty()) continue;
    const nlohmann::json object = nlohmann::json::parse(line);
    EXPECT_TRUE(object.contains("idle_seconds")) << line;
    ++objects;
  }
  EXPECT_EQ(objects, 2);
}

// attach --take-over ends the call that had the job with its own code, 68,
// never 74 ("outcome unknown"): the job runs on under the taker.
TEST(CliTest, TakeOverEndsTheDispatcherWithSixtyEight) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  const std::string address = daemon.address();
  CollectingJob first(
      Command({"dispatch", "--address", address, "--job-id", "held",
               "--no-stdin", "--", "sh", "-c", "echo one; sleep 2; echo two"}));
  std::optional<JobOutcome> first_end;
  std::thread run([&] { first_end = RunExec(first); });
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return absl::StrContains(first.out(), "one"); }));
  CollectingJob taker(
      Command({"attach", "--address", address, "--take-over", "held"}));
  EXPECT_EQ(RunExec(taker), JobOutcome::Exited(0)) << taker.err();
  run.join();
  EXPECT_EQ(taker.out(), "one\ntwo\n");
  EXPECT_EQ(first_end, JobOutcome::Exited(68)) << first.err();
  EXPECT_THAT(first.err(), HasSubstr("taken over"));
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
        // Client flags: the command, the flag, the value, what is wrong.
        BadStart{{"stop"},
                 {},
                 "cfdb-worker stop: --grace-seconds is required: 0 cancels "
                 "the jobs in flight now, > 0 lets them finish for up to that "
                 "many seconds, < 0 lets them finish without limit"},
        BadStart{{"stop", "--grace", "abc"},
                 {},
                 "cfdb-worker stop: --grace-seconds: 'abc' is not a number"},
        BadStart{{"stop", "--grace-seconds", "nan"},
                 {},
                 "cfdb-worker stop: --grace-seconds: 'nan' is not a finite"},
        BadStart{{"idle", "--timeout", "0"},
                 {},
                 "cfdb-worker idle: --timeout-seconds: '0' must be greater "
                 "than 0"},
        BadStart{{"health", "--timeout-seconds", "-3"},
                 {},
                 "cfdb-worker health: --timeout-seconds: '-3' must be greater"},
        BadStart{{"dispatch", "--time-limit", "-1", "--", "true"},
                 {},
                 "cfdb-worker dispatch: --time-limit-seconds: '-1' is "
                 "negative"},
        BadStart{{"dispatch", "--address", "", "--", "true"},
                 {},
                 "cfdb-worker dispatch: --address: '' is empty"},
        BadStart{{"reap", "--idle-threshold-seconds", "1", "--concurrency", "0",
                  "a:1"},
                 {},
                 "cfdb-worker reap: --concurrency: '0' is outside 1..4096"},
        BadStart{
            {"reap", "--idle-threshold-seconds", "1", "--format", "xml", "a:1"},
            {},
            "cfdb-worker reap: --format: 'xml' is not text or json"},
        BadStart{{"stop", "--grce", "5"},
                 {},
                 "cfdb-worker stop: --grce: not a flag of stop; did you mean "
                 "--grace?"},
        BadStart{{"reap", "--idle-threshold", "5", "a:1"},
                 {},
                 "did you mean --idle-threshold-seconds?"},
        BadStart{{"stp"},
                 {},
                 "cfdb-worker: 'stp' is not a command; did you "
                 "mean stop?"},
        BadStart{{"dispatch", "--env", "A=1", "B=2", "--", "true"},
                 {},
                 "cfdb-worker dispatch: 'B=2' was not expected (the program "
                 "and its arguments go after --"},
        BadStart{{"dispatch", "--env", "A=1"},
                 {},
                 "cfdb-worker dispatch: no program: give it after --"},
        BadStart{{"idle", "--", "x"},
                 {},
                 "cfdb-worker idle: takes no arguments, and 'x' came after "
                 "--"},
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
  EXPECT_THAT(second.err(), ::testing::Not(HasSubstr("No address added")))
      << "gRPC's own words for it are a debug line";
}

// A TLS call to a plaintext worker says so, in one line.
TEST(CliTest, ATlsCallToAPlaintextWorkerSaysItAnswersPlaintext) {
  test_support::TestPki pki;
  const test_support::Pem client = pki.Leaf("client", {"DNS:client"});
  Daemon daemon({"--idle-timeout-seconds", "0"});
  CollectingJob idle(
      Command({"idle", "--address", daemon.address(), "--tls-ca", pki.ca().cert,
               "--tls-cert", client.cert, "--tls-key", client.key}));
  EXPECT_EQ(RunExec(idle), JobOutcome::Exited(75));
  EXPECT_THAT(idle.err(), HasSubstr("handshake error (UNAVAILABLE): "));
  EXPECT_THAT(idle.err(), HasSubstr("; the worker at " + daemon.address() +
                                    " answers plaintext, not TLS: drop "
                                    "--tls-ca, --tls-cert and --tls-key"));
  const std::string err = idle.err();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1)
      << "gRPC's own handshake line is not a second one: " << err;
}

}  // namespace
}  // namespace cfdb::worker

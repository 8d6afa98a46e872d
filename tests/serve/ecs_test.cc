// Busy-aware scale-in protection on a real daemon, against a stand-in for
// the ECS agent's task-protection endpoint (tests/serve/fake_ecs_agent.py)
// reached through libcurl as on ECS.
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/daemon.h"
#include "support/fake_api.h"
#include "support/go_file.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Daemon;
using test_support::ExecRequest;
using ::testing::HasSubstr;

// FakeAgent runs fake_ecs_agent.py ARGS.
class FakeAgent : public test_support::FakeApi {
 public:
  explicit FakeAgent(std::vector<std::string> args)
      : FakeApi(CFDB_FAKE_ECS_AGENT, std::move(args)) {}
  // The task's agent URI, as ECS sets ECS_AGENT_URI.
  std::string uri() const {
    return absl::StrCat("http://127.0.0.1:", port(), "/api/task-1");
  }
};

std::vector<std::string> WithAgent(const FakeAgent& agent) {
  return {"/usr/bin/env", absl::StrCat("ECS_AGENT_URI=", agent.uri())};
}

std::unique_ptr<WorkerConnection> Connect(const Daemon& daemon) {
  return *WorkerConnection::Open(daemon.address());
}

void RunJob(WorkerConnection& connection, std::vector<std::string> argv) {
  EXPECT_TRUE(connection.Dispatch(ExecRequest(std::move(argv)), {}).ok());
}

// Overlapping jobs: one enable when the first starts, one disable when the
// last ends (no hold), at the endpoint ECS documents.
TEST(EcsScaleInTest, OverlappingJobsMakeOneEnableAndOneDisable) {
  FakeAgent agent({});
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection",
                 "--ecs-protection-hold-seconds", "0"},
                WithAgent(agent));
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = Connect(daemon);
  std::thread first([&] { RunJob(*connection, {"sleep", "3"}); });
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return connection->IdleTime(seconds(1)).value_or(1) == 0; }));
  std::thread second([&] { RunJob(*connection, {"sleep", "3"}); });
  first.join();
  second.join();
  ASSERT_TRUE(agent.WaitForRequests(2)) << daemon.log();
  // Once the worker is gone no call can follow: count them then.
  EXPECT_TRUE(connection->Stop(seconds(5), seconds(30)).ok());
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::vector<nlohmann::json> requests = agent.Requests();
  ASSERT_EQ(requests.size(), 2u) << "edges only, no call per job";
  EXPECT_EQ(requests[0]["path"], "/api/task-1/task-protection/v1/state");
  EXPECT_EQ(requests[0]["body"], nlohmann::json({{"ProtectionEnabled", true},
                                                 {"ExpiresInMinutes", 120}}));
  EXPECT_EQ(requests[1]["body"],
            nlohmann::json({{"ProtectionEnabled", false}}));
  EXPECT_THAT(daemon.log(), HasSubstr("scale-in protection: enabled for 120"));
  EXPECT_THAT(daemon.log(), HasSubstr("scale-in protection: disabled (idle)"));
}

// Calls per busy period: 20 sequential short jobs, each arriving within the
// hold after the one before, make one enable, and the disable comes once
// the docket has stayed empty for the hold.
TEST(EcsScaleInTest, TwentySequentialJobsMakeTwoCalls) {
  constexpr auto kHold = seconds(3);
  FakeAgent agent({});
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection",
                 "--ecs-protection-hold-seconds", "3"},
                WithAgent(agent));
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = Connect(daemon);
  test_support::RunJobUntilArrival(*connection, agent, 0);
  for (int i = 0; i < 18; ++i) RunJob(*connection, {"true"});
  // The docket empties after this moment for the last time.
  const auto before_last = std::chrono::steady_clock::now();
  RunJob(*connection, {"true"});
  ASSERT_TRUE(agent.WaitForRequests(2)) << daemon.log();
  EXPECT_GE(std::chrono::steady_clock::now() - before_last, kHold)
      << "the disable came before the hold was over";
  EXPECT_TRUE(connection->Stop(seconds(5), seconds(30)).ok());
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::vector<nlohmann::json> requests = agent.Requests();
  ASSERT_EQ(requests.size(), 2u) << daemon.log();
  EXPECT_EQ(requests[0]["body"]["ProtectionEnabled"], true);
  EXPECT_EQ(requests[1]["body"]["ProtectionEnabled"], false);
}

// A worker that retires within the hold sends no disable: the task ends
// with the process, and its protection with it (docs/DEPLOY.md).
TEST(EcsScaleInTest, AWorkerThatStopsInTheHoldMakesNoCall) {
  FakeAgent agent({});
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection"},
                WithAgent(agent));  // the default hold, 60 s
  auto connection = Connect(daemon);
  test_support::RunJobUntilArrival(*connection, agent, 0);
  ASSERT_TRUE(agent.WaitForRequests(1)) << daemon.log();
  EXPECT_TRUE(connection->Stop(seconds(5), seconds(30)).ok());
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  ASSERT_EQ(agent.Requests().size(), 1u) << daemon.log();
  EXPECT_THAT(daemon.log(), HasSubstr("for 60.0 s after the last"));
}

// The agent answers 500 once: the enable is retried and takes; the failure
// is logged once.
TEST(EcsScaleInTest, AServerErrorIsRetriedAndEndsEnabled) {
  FakeAgent agent({"--statuses", "500,200"});
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection",
                 "--ecs-protection-expires-minutes", "30"},
                WithAgent(agent));
  auto connection = Connect(daemon);
  std::thread job([&] { RunJob(*connection, {"sleep", "3"}); });
  ASSERT_TRUE(agent.WaitForRequests(2)) << daemon.log();
  const std::vector<nlohmann::json> requests = agent.Requests();
  EXPECT_EQ(requests[0]["status"], 500);
  EXPECT_EQ(requests[1]["status"], 200);
  EXPECT_EQ(requests[1]["body"]["ProtectionEnabled"], true);
  EXPECT_EQ(requests[1]["body"]["ExpiresInMinutes"], 30);
  job.join();
  EXPECT_THAT(daemon.log(), HasSubstr("did not take \"enabled\""));
  EXPECT_THAT(daemon.log(), HasSubstr("answered again after 1 failed"));
}

// An agent that hangs delays neither the job nor Idle; once it answers, the
// docket's state then (idle) is applied. The job runs until the enable has
// reached the agent: a job that ended before the protection's thread woke
// would rightly cost no call at all (the latest state wins).
TEST(EcsScaleInTest, AHangingAgentDelaysNothingAndTheLatestStateWins) {
  // Under the agent call's 5 s timeout (kAgentCallTimeout).
  FakeAgent agent({"--hang-first", "4.5"});
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection",
                 "--ecs-protection-hold-seconds", "0"},
                WithAgent(agent));
  auto connection = Connect(daemon);
  const test_support::GoFile go;
  std::thread job([&] { RunJob(*connection, {"sh", "-c", go.WaitCommand()}); });
  ASSERT_TRUE(agent.WaitForArrival(0)) << daemon.log();
  const auto start = std::chrono::steady_clock::now();
  go.Open();
  job.join();
  EXPECT_TRUE((*connection).IdleTime(seconds(5)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(3))
      << "the 4.5 s hang held up the job or Idle";
  EXPECT_TRUE(agent.Requests().empty()) << "still hanging";
  ASSERT_TRUE(agent.WaitForRequests(2)) << daemon.log();
  EXPECT_EQ(agent.Requests()[0]["body"]["ProtectionEnabled"], true);
  EXPECT_EQ(agent.Requests()[1]["body"]["ProtectionEnabled"], false);
}

TEST(EcsScaleInTest, OffEcsTheWorkerSaysSoAndCarriesOn) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--ecs-scale-in-protection"});
  ASSERT_GT(daemon.port(), 0);
  auto connection = Connect(daemon);
  RunJob(*connection, {"true"});
  EXPECT_THAT(daemon.log(), HasSubstr("ECS_AGENT_URI is not set"));
}

// EMF metrics from a real daemon: the lines validate against the published
// schema, and their counts add up to the jobs run.
TEST(EmfMetricsTest, LinesValidateAndCountTheJobsRun) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--log-format", "json",
                 "--metrics-interval-seconds", "1", "--metrics-service",
                 "workers-test"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = Connect(daemon);
  RunJob(*connection, {"true"});
  RunJob(*connection, {"true"});
  RunJob(*connection, {"false"});
  std::thread cancelled([&] { RunJob(*connection, {"sleep", "30"}); });
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return (*connection).IdleTime(seconds(1)).value_or(1) == 0; }));
  // An interval line (the first, at 1 s) while it runs.
  ASSERT_TRUE(daemon.WaitForLog("\"JobsInFlight\":1")) << daemon.log();
  EXPECT_TRUE((*connection).Stop(Duration::zero(), seconds(30)).ok());
  cancelled.join();
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));

  std::map<std::string, double> sums;
  double most_in_flight = 0;
  nlohmann::json exit_line;
  int lines = 0;
  for (absl::string_view text : absl::StrSplit(daemon.log(), '\n')) {
    if (text.find("\"_aws\"") == text.npos) continue;
    const nlohmann::json line = nlohmann::json::parse(std::string(text));
    ++lines;
    EXPECT_EQ(line["Service"], "workers-test");
    if (line.contains("ExitReason")) {
      exit_line = line;
      continue;
    }
    for (const char* name :
         {"JobsStarted", "JobsSucceeded", "JobsFailed", "JobsCancelled"}) {
      sums[name] += line[name].get<double>();
    }
    most_in_flight =
        std::max(most_in_flight, line["JobsInFlight"].get<double>());
  }
  EXPECT_GE(lines, 3);
  EXPECT_EQ(sums["JobsStarted"], 4);
  EXPECT_EQ(sums["JobsSucceeded"], 2);
  EXPECT_EQ(sums["JobsFailed"], 1);
  EXPECT_EQ(sums["JobsCancelled"], 1);
  EXPECT_EQ(most_in_flight, 1);
  EXPECT_EQ(exit_line["ExitReason"], "stop rpc");
  EXPECT_EQ(exit_line["Retirements"], 1);
  EXPECT_GT(exit_line["UptimeSeconds"].get<double>(), 0.5);

  JobRequest validate =
      ExecRequest({"/usr/bin/python3", CFDB_EMF_VALIDATE, CFDB_EMF_SCHEMA});
  MutableExec(validate).stdin_data = daemon.log();
  CollectingJob check(validate);
  EXPECT_EQ(RunExec(check), JobOutcome::Exited(0))
      << check.out() << check.err();
  EXPECT_THAT(check.out(), HasSubstr(absl::StrCat("ok ", lines)));
}

// With text logs there is nowhere for EMF to go: no metrics, and it says so.
TEST(EmfMetricsTest, TextLogsCarryNoMetrics) {
  Daemon daemon(
      {"--idle-timeout-seconds", "0", "--metrics-interval-seconds", "1"});
  ASSERT_GT(daemon.port(), 0);
  EXPECT_TRUE(daemon.WaitForLog("metrics: off"));
  // Were metrics on, the exit would write a line at least.
  EXPECT_TRUE(Connect(daemon)->Stop(Duration::zero(), seconds(30)).ok());
  ASSERT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), ::testing::Not(HasSubstr("_aws")));
}

}  // namespace
}  // namespace cfdb::worker

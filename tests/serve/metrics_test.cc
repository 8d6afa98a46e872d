// EMF metrics lines: what each carries, and the reporter's cadence.
#include "serve/metrics.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;

TEST(MetricsLineTest, AnIntervalLineCountsSinceTheLastOne) {
  const MetricsSnapshot since{.jobs = {.started = 3,
                                       .succeeded = 2,
                                       .failed = 1,
                                       .cancelled = 0,
                                       .unread_evicted = 2},
                              .poll_failures = 4};
  const MetricsSnapshot now{.in_flight = 2,
                            .jobs = {.started = 8,
                                     .succeeded = 4,
                                     .failed = 1,
                                     .cancelled = 1,
                                     .unread_evicted = 5},
                            .idle_seconds = 0,
                            .poll_failures = 5};
  const auto line = nlohmann::json::parse(
      FormatIntervalLine("workers-dev", now, since, 1764000000123));
  EXPECT_EQ(line["_aws"]["Timestamp"], 1764000000123);
  EXPECT_EQ(line["time"], "2025-11-24T16:00:00.123Z") << "a JSON log line too";
  EXPECT_EQ(line["level"], "info");
  EXPECT_EQ(line["message"], "metrics");
  const auto& directive = line["_aws"]["CloudWatchMetrics"][0];
  EXPECT_EQ(directive["Namespace"], "cfdb-worker");
  EXPECT_EQ(directive["Dimensions"], nlohmann::json::parse(R"([["Service"]])"));
  std::vector<std::string> names;
  for (const auto& metric : directive["Metrics"]) {
    names.push_back(metric["Name"]);
    EXPECT_EQ(metric["Unit"],
              metric["Name"] == "IdleSeconds" ? "Seconds" : "Count");
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "JobsInFlight", "JobsStarted", "JobsSucceeded",
                         "JobsFailed", "JobsCancelled", "UnreadResultsEvicted",
                         "IdleSeconds", "IdlePollFailures"));
  EXPECT_EQ(line["Service"], "workers-dev");
  EXPECT_EQ(line["JobsInFlight"], 2);
  EXPECT_EQ(line["JobsStarted"], 5);
  EXPECT_EQ(line["JobsSucceeded"], 2);
  EXPECT_EQ(line["JobsFailed"], 0);
  EXPECT_EQ(line["JobsCancelled"], 1);
  EXPECT_EQ(line["UnreadResultsEvicted"], 3);
  EXPECT_EQ(line["IdleSeconds"], 0.0);
  EXPECT_EQ(line["IdlePollFailures"], 1);
}

TEST(MetricsLineTest, TheExitLineSaysWhyAndHowLong) {
  const auto line = nlohmann::json::parse(
      FormatExitLine("workers-dev", "max lifetime", 43110.5, 1764000000000));
  EXPECT_EQ(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            nlohmann::json::parse(R"([["Service","ExitReason"]])"));
  EXPECT_EQ(line["ExitReason"], "max lifetime");
  EXPECT_EQ(line["Retirements"], 1);
  EXPECT_EQ(line["UptimeSeconds"], 43110.5);
}

// A line every interval, each with the counts since the one before; Retire
// writes what is left and the exit line, and nothing comes after.
TEST(MetricsReporterTest, LinesComeEveryIntervalAndEndWithTheExitLine) {
  absl::Mutex mu;
  std::vector<nlohmann::json> lines;
  std::atomic<uint64_t> started{0};
  MetricsReporter reporter(
      milliseconds(20), "svc",
      [&] {
        return MetricsSnapshot{.jobs = {.started = started.fetch_add(1) + 1}};
      },
      [&](const std::string& line) {
        absl::MutexLock lock(&mu);
        lines.push_back(nlohmann::json::parse(line));
      });
  ASSERT_TRUE(test_support::WaitFor([&] {
    absl::MutexLock lock(&mu);
    return lines.size() >= 3;
  }));
  reporter.Retire("idle", 1.5);
  reporter.Retire("idle", 1.5);
  absl::MutexLock lock(&mu);
  ASSERT_GE(lines.size(), 5u);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["JobsStarted"], 1) << "per interval, not since start";
  }
  EXPECT_EQ(lines.back()["ExitReason"], "idle");
  EXPECT_EQ(lines.back()["UptimeSeconds"], 1.5);
  EXPECT_FALSE(lines[lines.size() - 2].contains("ExitReason"))
      << "the last interval, then the exit line, once";
}

}  // namespace
}  // namespace cfdb::worker

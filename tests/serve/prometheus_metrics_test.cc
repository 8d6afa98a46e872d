// The metric table against what RenderMetrics writes: every row once, in
// order, with its type; labels only from their written sets; the RPC rows
// from the registry.
#include "serve/prometheus_metrics.h"

#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "rpc/rpc_counter.h"
#include "serve/metrics.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TypeName(MetricType type) {
  return type == MetricType::kCounter ? "counter"
         : type == MetricType::kGauge ? "gauge"
                                      : "histogram";
}

MetricsReading Busy() {
  MetricsReading r{.in_flight = 1,
                   .max_concurrent = 4,
                   .idle_seconds = 0,
                   .retained = 3,
                   .lifetime_retirement = 1.8e9,
                   .policy = {.polls_answered = 7},
                   .version = "1.2.3"};
  r.jobs.started = 5;
  r.jobs.ended[static_cast<std::size_t>(JobEnd::kTimedOut)] = 2;
  r.rpcs.calls[static_cast<std::size_t>(Rpc::kDispatch)][8] = 3;  // exhausted
  r.rpcs.calls.back()[12] = 1;  // a method not served, UNIMPLEMENTED
  return r;
}

TEST(PrometheusMetricsTest, EveryRowIsOneFamilyInTableOrderWithItsType) {
  const std::string text = RenderMetrics(Busy(), {});
  std::vector<std::pair<std::string, std::string>> types;
  std::istringstream lines(text);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, m, std::regex(R"(# TYPE (\S+) (\S+))"))) {
      types.emplace_back(m[1], m[2]);
    }
  }
  ASSERT_EQ(types.size(), std::size(kMetricTable)) << text;
  for (std::size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(types[i].first, kMetricTable[i].name);
    EXPECT_EQ(types[i].second, TypeName(kMetricTable[i].type))
        << types[i].first;
  }
}

TEST(PrometheusMetricsTest, NamesFollowTheFieldsConventions) {
  for (const MetricRow& row : kMetricTable) {
    const std::string name(row.name);
    EXPECT_TRUE(name.starts_with("cfdb_worker_") ||
                name.starts_with("process_"))
        << name;
    EXPECT_EQ(row.type == MetricType::kCounter, name.ends_with("_total"))
        << name << ": counters, and only they, end in _total";
    EXPECT_FALSE(row.help.empty()) << name;
  }
}

// A row whose values are a plain list: every sample's value is in it.
TEST(PrometheusMetricsTest, LabelValuesComeFromTheirWrittenSets) {
  const std::string text = RenderMetrics(Busy(), {});
  for (const MetricRow& row : kMetricTable) {
    if (row.labels.empty() || row.labels.find(',') != row.labels.npos ||
        row.values.find(':') != row.values.npos || row.values == "VERSION") {
      continue;
    }
    const std::vector<std::string> allowed =
        absl::StrSplit(std::string(row.values), ',');
    const std::set<std::string> set(allowed.begin(), allowed.end());
    const std::regex sample(std::string(row.name) + "\\{" +
                            std::string(row.labels) + "=\"([^\"]*)\"\\}");
    for (std::sregex_iterator it(text.begin(), text.end(), sample), end;
         it != end; ++it) {
      EXPECT_TRUE(set.contains((*it)[1])) << row.name << ": " << (*it)[1];
    }
  }
}

TEST(PrometheusMetricsTest, ReadsWhatItIsGiven) {
  const std::string text = RenderMetrics(Busy(), {.open_fds = 9});
  EXPECT_THAT(text, HasSubstr("\ncfdb_worker_busy 1\n"));
  EXPECT_THAT(text, HasSubstr("\ncfdb_worker_jobs_retained 3\n"));
  EXPECT_THAT(
      text,
      HasSubstr("cfdb_worker_jobs_finished_total{outcome=\"timed_out\"} 2"));
  EXPECT_THAT(
      text,
      HasSubstr("cfdb_worker_jobs_refused_total{reason=\"docket_full\"} 3"));
  EXPECT_THAT(text, HasSubstr("cfdb_worker_rpcs_total{method=\"Dispatch\","
                              "code=\"RESOURCE_EXHAUSTED\"} 3"));
  EXPECT_THAT(text, HasSubstr("cfdb_worker_rpcs_total{method=\"unknown\","
                              "code=\"UNIMPLEMENTED\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("code=\"OK\"")))
      << "codes never seen have no series";
  EXPECT_THAT(text, HasSubstr("cfdb_worker_build_info{version=\"1.2.3\"} 1"));
  EXPECT_THAT(text,
              Not(HasSubstr("\ncfdb_worker_drain_deadline_timestamp_seconds ")))
      << "not draining";
  MetricsReading draining = Busy();
  draining.drain_deadline = std::numeric_limits<double>::infinity();
  EXPECT_THAT(
      RenderMetrics(draining, {}),
      HasSubstr("\ncfdb_worker_drain_deadline_timestamp_seconds +Inf\n"));
  EXPECT_THAT(text, HasSubstr("\nprocess_open_fds 9\n"));
  EXPECT_THAT(text, HasSubstr("{rule=\"max_lifetime\"}"));
  EXPECT_THAT(text, Not(HasSubstr("{rule=\"idle\"}")))
      << "no idle retirement reading given";
  EXPECT_THAT(
      text,
      HasSubstr("cfdb_worker_job_duration_seconds_bucket{le=\"14400\"} 0"));
}

TEST(PrometheusMetricsTest, HistogramsCountEachEndedJobOnce) {
  JobHistograms histograms;
  histograms.Observe(
      {.start = std::chrono::milliseconds(3), .total = std::chrono::hours(5)});
  MetricsReading reading = Busy();
  reading.histograms = &histograms;
  const std::string text = RenderMetrics(reading, {});
  EXPECT_THAT(
      text, HasSubstr("cfdb_worker_job_start_seconds_bucket{le=\"0.0025\"} 0"));
  EXPECT_THAT(
      text, HasSubstr("cfdb_worker_job_start_seconds_bucket{le=\"0.005\"} 1"));
  EXPECT_THAT(
      text,
      HasSubstr("cfdb_worker_job_duration_seconds_bucket{le=\"14400\"} 0"));
  EXPECT_THAT(
      text,
      HasSubstr("cfdb_worker_job_duration_seconds_bucket{le=\"21600\"} 1"));
  EXPECT_THAT(text, HasSubstr("cfdb_worker_job_duration_seconds_count 1"));
}

TEST(PrometheusMetricsTest, ProcessIsReadFromProc) {
  const ProcessReading p = ReadProcess();
  EXPECT_GT(p.resident_bytes, 0);
  EXPECT_GT(p.open_fds, 2);
  EXPECT_GT(p.max_fds, p.open_fds);
  EXPECT_GT(p.start_time_seconds, 1.6e9);
  EXPECT_GE(p.cpu_seconds, 0);
}

// Sample is the value of `series` in `text`, or -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos
             ? -1
             : std::stod(text.substr(at + series.size() + 2));
}

// The EMF line and the metrics, read from one worker at one moment, say
// the same: every EMF figure is the sum of its Prometheus series.
TEST(PrometheusMetricsTest, TheEmfLineAgreesWithTheMetrics) {
  Worker worker(WorkerOptions{.max_concurrent_tasks = 4});
  ASSERT_TRUE(
      worker
          .RegisterKind("ends",
                        {.run =
                             [](JobContext& ctx) {
                               const std::string& how = ctx.request().payload;
                               using enum JobOutcome::Failure;
                               if (how == "signal") {
                                 return JobOutcome::Signaled(9);
                               }
                               if (how == "late") {
                                 return JobOutcome::Failed(kTimeLimitExceeded,
                                                           "late");
                               }
                               if (how == "cancel") {
                                 return JobOutcome::Failed(kCancelled, "");
                               }
                               return JobOutcome::Exited(how == "0" ? 0 : 3);
                             }})
          .ok());
  int n = 0;
  for (const char* how : {"0", "0", "3", "signal", "late", "cancel"}) {
    JobRequest request;
    request.job_id = absl::StrCat("emf-", n++);
    request.kind = "ends";
    request.payload = how;
    auto job = std::make_shared<test_support::CollectingJob>(request);
    ASSERT_TRUE(worker.Dispatch(job).ok());
    ASSERT_TRUE(
        test_support::WaitFor([&] { return job->outcome().has_value(); }));
  }
  const JobCounts counts = worker.counts();
  const double idle = ToSeconds(worker.Idle());
  const nlohmann::json emf =
      nlohmann::json::parse(FormatIntervalLine("svc",
                                               {.in_flight = 0,
                                                .jobs = counts,
                                                .idle_seconds = idle,
                                                .poll_failures = 2},
                                               {}, 0));
  const std::string text = RenderMetrics({.in_flight = 0,
                                          .idle_seconds = idle,
                                          .jobs = counts,
                                          .policy = {.polls_failed = 2}},
                                         {});
  const auto finished = [&](const char* outcome) {
    return Sample(text,
                  absl::StrCat("cfdb_worker_jobs_finished_total{outcome=\"",
                               outcome, "\"}"));
  };
  EXPECT_EQ(emf["JobsStarted"], 6);
  EXPECT_EQ(emf["JobsStarted"].get<double>(),
            Sample(text, "cfdb_worker_jobs_started_total"));
  EXPECT_EQ(emf["JobsSucceeded"].get<double>(), finished("succeeded"));
  EXPECT_EQ(emf["JobsFailed"].get<double>(),
            finished("exited_nonzero") + finished("signaled") +
                finished("start_failed") + finished("timed_out") +
                finished("handler_error"));
  EXPECT_EQ(emf["JobsFailed"], 3);
  EXPECT_EQ(emf["JobsCancelled"].get<double>(), finished("cancelled"));
  EXPECT_EQ(emf["JobsInFlight"].get<double>(),
            Sample(text, "cfdb_worker_jobs_in_flight"));
  EXPECT_EQ(emf["IdleSeconds"].get<double>(),
            Sample(text, "cfdb_worker_idle_seconds"));
  EXPECT_EQ(emf["IdlePollFailures"].get<double>(),
            Sample(text, "cfdb_worker_idle_polls_total{result=\"failed\"}"));
  EXPECT_EQ(emf["UnreadResultsEvicted"].get<double>(),
            Sample(text, "cfdb_worker_unread_results_evicted_total"));
}

// The names the shipped alerts and dashboard use are the worker's.
TEST(PrometheusMetricsTest, TheAlertsAndTheDashboardUseOnlyItsMetrics) {
  std::set<std::string> exported;
  for (const MetricRow& row : kMetricTable) {
    exported.emplace(row.name);
    if (row.type == MetricType::kHistogram) {
      for (const char* part : {"_bucket", "_count", "_sum"}) {
        exported.insert(std::string(row.name) + part);
      }
    }
  }
  for (const char* path : {CFDB_ALERTS, CFDB_DASHBOARD}) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    ASSERT_FALSE(text.empty()) << path;
    const std::regex name(R"((cfdb_worker_[a-z_]+|process_[a-z_]+))");
    int used = 0;
    for (std::sregex_iterator it(text.begin(), text.end(), name), end;
         it != end; ++it, ++used) {
      EXPECT_TRUE(exported.contains((*it)[1])) << path << ": " << (*it)[1];
    }
    EXPECT_GT(used, 5) << path;
  }
}

TEST(RpcCounterTest, EveryServedPathHasItsRowAndTheRestShareOne) {
  EXPECT_EQ(RpcRowOf("/cfdb.worker.v1.Worker/Idle"),
            static_cast<std::size_t>(Rpc::kIdle));
  EXPECT_EQ(RpcRowOf("/cfdb.worker.v1.Worker/DispatchStream"),
            static_cast<std::size_t>(Rpc::kDispatch));
  EXPECT_EQ(RpcRowOf("/grpc.health.v1.Health/Watch"),
            static_cast<std::size_t>(Rpc::kHealth));
  EXPECT_EQ(RpcRowOf("/wool.runtime.protobuf.wire.Worker/stop"),
            static_cast<std::size_t>(Rpc::kStop));
  for (const char* other : {"/cfdb.worker.v1.Worker/Nope", "/x.Y/Idle", "",
                            "/cfdb.worker.v1.Worker/Check"}) {
    EXPECT_EQ(RpcRowOf(other), std::size(kRpcs)) << other;
  }
  for (const RpcInfo& info : kRpcs) {
    if (info.rpc == Rpc::kHealth) continue;
    EXPECT_EQ(RpcRowOf(std::string("/cfdb.worker.v1.Worker/") +
                       std::string(info.name)),
              static_cast<std::size_t>(info.rpc))
        << info.name;
  }
}

}  // namespace
}  // namespace cfdb::worker

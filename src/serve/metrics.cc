#include "serve/metrics.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace cfdb::worker {
namespace {

using Json = nlohmann::ordered_json;

struct Metric {
  const char* name;
  const char* unit;  // an EMF unit: Count, Seconds
};

// Line is an EMF document that is also a line of the JSON log (time, level,
// message first, as every other line): the _aws block declaring `metrics`
// under `dimensions` of `kMetricsNamespace`, then the members it
// references.
Json Line(int64_t timestamp_ms, const char* message,
          std::initializer_list<Metric> metrics,
          std::initializer_list<const char*> dimensions) {
  Json declared = Json::array();
  for (const Metric& m : metrics) {
    declared.push_back({{"Name", m.name}, {"Unit", m.unit}});
  }
  Json line;
  line["time"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                       absl::FromUnixMillis(timestamp_ms), absl::UTCTimeZone());
  line["level"] = "info";
  line["message"] = message;
  line["_aws"] = {
      {"Timestamp", timestamp_ms},
      {"CloudWatchMetrics",
       Json::array({{{"Namespace", kMetricsNamespace},
                     {"Dimensions", Json::array({Json(dimensions)})},
                     {"Metrics", declared}}})}};
  return line;
}

std::string Dump(const Json& line) {
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

std::string FormatIntervalLine(std::string_view service,
                               const MetricsSnapshot& now,
                               const MetricsSnapshot& since,
                               int64_t timestamp_ms) {
  Json line = Line(timestamp_ms, "metrics",
                   {{"JobsInFlight", "Count"},
                    {"JobsStarted", "Count"},
                    {"JobsSucceeded", "Count"},
                    {"JobsFailed", "Count"},
                    {"JobsCancelled", "Count"},
                    {"UnreadResultsEvicted", "Count"},
                    {"IdleSeconds", "Seconds"},
                    {"IdlePollFailures", "Count"}},
                   {"Service"});
  line["Service"] = std::string(service);
  line["JobsInFlight"] = now.in_flight;
  line["JobsStarted"] = now.jobs.started - since.jobs.started;
  line["JobsSucceeded"] = now.jobs.succeeded - since.jobs.succeeded;
  line["JobsFailed"] = now.jobs.failed - since.jobs.failed;
  line["JobsCancelled"] = now.jobs.cancelled - since.jobs.cancelled;
  line["UnreadResultsEvicted"] =
      now.jobs.unread_evicted - since.jobs.unread_evicted;
  line["IdleSeconds"] = now.idle_seconds;
  line["IdlePollFailures"] = now.poll_failures - since.poll_failures;
  return Dump(line);
}

std::string FormatExitLine(std::string_view service,
                           std::string_view exit_reason, double uptime_seconds,
                           int64_t timestamp_ms) {
  Json line = Line(timestamp_ms, "metrics at exit",
                   {{"Retirements", "Count"}, {"UptimeSeconds", "Seconds"}},
                   {"Service", "ExitReason"});
  line["Service"] = std::string(service);
  line["ExitReason"] = std::string(exit_reason);
  line["Retirements"] = 1;
  line["UptimeSeconds"] = uptime_seconds;
  return Dump(line);
}

int64_t EpochMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

MetricsReporter::MetricsReporter(Duration interval, std::string service,
                                 std::function<MetricsSnapshot()> snapshot,
                                 std::function<void(const std::string&)> write)
    : interval_(interval),
      service_(std::move(service)),
      snapshot_(std::move(snapshot)),
      write_(std::move(write)) {
  thread_ = std::thread([this] { Run(); });
}

MetricsReporter::~MetricsReporter() { Stop(); }

void MetricsReporter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  std::call_once(joined_, [this] { thread_.join(); });
}

void MetricsReporter::Run() {
  absl::MutexLock lock(&mu_);
  TimePoint next = std::chrono::steady_clock::now() + interval_;
  while (!stop_) {
    if (wake_.WaitUntil(mu_, next) || stop_) continue;
    WriteInterval();
    // After a stall, the next line an interval from now, not a burst.
    next = std::max(next + interval_, std::chrono::steady_clock::now());
  }
}

void MetricsReporter::WriteInterval() {
  const MetricsSnapshot now = snapshot_();
  write_(FormatIntervalLine(service_, now, last_, EpochMilliseconds()));
  last_ = now;
}

void MetricsReporter::Retire(std::string_view exit_reason,
                             double uptime_seconds) {
  Stop();
  absl::MutexLock lock(&mu_);
  if (retired_) return;
  retired_ = true;
  WriteInterval();
  write_(FormatExitLine(service_, exit_reason, uptime_seconds,
                        EpochMilliseconds()));
}

}  // namespace cfdb::worker

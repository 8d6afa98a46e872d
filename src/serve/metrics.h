// Metrics in CloudWatch's Embedded Metric Format (EMF; AWS's
// "Specification: Embedded metric format"): with JSON logs, the worker
// writes one log line per interval whose `_aws` block makes CloudWatch Logs
// extract metrics, without an agent or an open port, and one line at exit.
// Each is a line of the JSON log like any other (time, level, message),
// written whatever the log level.
//
//   {"time":"...Z","level":"info","message":"metrics","_aws":{"Timestamp":1764000000000,"CloudWatchMetrics":[{"Namespace":
//    "cfdb-worker","Dimensions":[["Service"]],"Metrics":[{"Name":
//    "JobsInFlight","Unit":"Count"},...]}]},"Service":"workers",
//    "JobsInFlight":1,"JobsStarted":3,...}
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

inline constexpr char kMetricsNamespace[] = "cfdb-worker";

// MetricsSnapshot is the worker as the reporter reads it: counts since
// start, which the reporter turns into counts per interval.
struct MetricsSnapshot {
  std::size_t in_flight = 0;
  JobCounts jobs;
  double idle_seconds = 0;
  uint64_t poll_failures = 0;  // failed self-polls since start
};

// FormatIntervalLine is the EMF line of one interval: jobs in flight and
// idle seconds now; jobs started, succeeded, failed and cancelled and idle
// polls failed since the last line (`since`). Dimension: Service.
std::string FormatIntervalLine(std::string_view service,
                               const MetricsSnapshot& now,
                               const MetricsSnapshot& since,
                               int64_t timestamp_ms);

// FormatExitLine is the EMF line at exit: Retirements 1 and UptimeSeconds,
// by Service and ExitReason ("idle", "max lifetime", "signal", ...).
std::string FormatExitLine(std::string_view service,
                           std::string_view exit_reason, double uptime_seconds,
                           int64_t timestamp_ms);

// MetricsReporter writes an interval line every `interval` on a thread of
// its own, reading `snapshot`, and writes through `write` (one line, no
// newline). Thread-safe.
class MetricsReporter {
 public:
  MetricsReporter(Duration interval, std::string service,
                  std::function<MetricsSnapshot()> snapshot,
                  std::function<void(const std::string&)> write);
  // Stops the thread (a wait in progress ends at once) without a last line.
  ~MetricsReporter();
  MetricsReporter(const MetricsReporter&) = delete;
  MetricsReporter& operator=(const MetricsReporter&) = delete;

  // Retire stops the thread, writes the interval line of what is left and
  // the exit line. Once; later calls do nothing.
  void Retire(std::string_view exit_reason, double uptime_seconds);

 private:
  void Run();
  void Stop();
  // WriteInterval writes the line since the last one.
  void WriteInterval() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Duration interval_;
  const std::string service_;
  const std::function<MetricsSnapshot()> snapshot_;
  const std::function<void(const std::string&)> write_;
  absl::Mutex mu_;
  MetricsSnapshot last_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;
  CondVar wake_;
  std::thread thread_;
  std::once_flag joined_;
};

// EpochMilliseconds is the wall clock as EMF's Timestamp wants it.
int64_t EpochMilliseconds();

}  // namespace cfdb::worker

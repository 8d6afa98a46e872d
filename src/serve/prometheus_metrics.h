// The worker's Prometheus metrics: the one table of what it exports
// (kMetricTable: name, type, labels, help), which docs/METRICS.md is
// generated from and the tests check the output against, and the
// rendering of one reading in the text exposition format 0.0.4, by
// prometheus-cpp's serializer. Everything is read at scrape time from the
// counters and clocks the Idle RPC and the EMF lines read too, so none of
// them disagree.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"
#include "prometheus/client_metric.h"
#include "prometheus/histogram.h"
#include "serve/retirement.h"

namespace cfdb::worker {

enum class MetricType { kGauge, kCounter, kHistogram };

struct MetricRow {
  std::string_view name;
  MetricType type;
  // Its labels, comma-separated, and their values, written once (each a
  // bounded set): a list, or where the values live.
  std::string_view labels;
  std::string_view values;
  std::string_view help;
};

inline constexpr MetricRow kMetricTable[] = {
    {"cfdb_worker_jobs_in_flight", MetricType::kGauge, "", "",
     "Jobs in the docket now."},
    {"cfdb_worker_max_concurrent_jobs", MetricType::kGauge, "", "",
     "The docket's size (--max-concurrent-tasks)."},
    {"cfdb_worker_busy", MetricType::kGauge, "", "",
     "1 while a job is in flight, else 0."},
    {"cfdb_worker_idle_seconds", MetricType::kGauge, "", "",
     "Seconds since the docket last became empty (startup counts as "
     "empty); 0 while busy. The Idle RPC's reading."},
    {"cfdb_worker_jobs_started_total", MetricType::kCounter, "", "",
     "Jobs accepted into the docket."},
    {"cfdb_worker_jobs_finished_total", MetricType::kCounter, "outcome",
     "succeeded,exited_nonzero,signaled,start_failed,timed_out,handler_error,"
     "cancelled",
     "Jobs ended, by how."},
    {"cfdb_worker_jobs_refused_total", MetricType::kCounter, "reason",
     "docket_full,stopping,duplicate_id,admission,bad_request",
     "Dispatch calls refused before a job was accepted, by why (from the "
     "codes Dispatch answered: RESOURCE_EXHAUSTED, UNAVAILABLE, "
     "ALREADY_EXISTS, PERMISSION_DENIED, INVALID_ARGUMENT)."},
    {"cfdb_worker_job_start_seconds", MetricType::kHistogram, "", "",
     "From a job's acceptance to its work beginning (the exec kind: its "
     "program started)."},
    {"cfdb_worker_job_duration_seconds", MetricType::kHistogram, "", "",
     "From a job's acceptance to its end (the time it held a slot)."},
    {"cfdb_worker_jobs_retained", MetricType::kGauge, "", "",
     "Jobs known by id: in flight, or ended with their result retained."},
    {"cfdb_worker_job_output_buffered_bytes", MetricType::kGauge, "", "",
     "Output the known jobs hold now, read or not."},
    {"cfdb_worker_job_output_dropped_bytes_total", MetricType::kCounter, "", "",
     "Output dropped: by drop-oldest when nobody read fast enough, or "
     "unread when its job was cancelled."},
    {"cfdb_worker_unread_results_evicted_total", MetricType::kCounter, "", "",
     "Results of detached jobs evicted before any client read them."},
    {"cfdb_worker_draining", MetricType::kGauge, "", "",
     "1 once a stop was asked for (the docket refuses new jobs), else 0."},
    {"cfdb_worker_drain_deadline_timestamp_seconds", MetricType::kGauge, "", "",
     "While draining: when the drain ends at the latest, cancelling what "
     "still runs (Unix seconds; +Inf without a limit). Absent otherwise."},
    {"cfdb_worker_retirement_timestamp_seconds", MetricType::kGauge, "rule",
     "idle,max_lifetime",
     "When the worker retires by each rule if nothing changes (Unix "
     "seconds); absent while the rule cannot apply (busy, or the rule "
     "off)."},
    {"cfdb_worker_idle_polls_total", MetricType::kCounter, "result",
     "answered,failed", "The self-poll's Idle calls, by result."},
    {"cfdb_worker_listener_checks_total", MetricType::kCounter, "result",
     "answered,unanswered,unknown",
     "New connections to the worker's own listener, by result (unknown: "
     "this process could open no descriptor)."},
    {"cfdb_worker_listener_lost", MetricType::kGauge, "", "",
     "1 once the listener counts as lost (the worker then exits 1)."},
    {"cfdb_worker_scale_in_protected", MetricType::kGauge, "", "",
     "1 while the ECS agent holds the task protected from scale-in, else 0 "
     "(0 without --ecs-scale-in-protection)."},
    {"cfdb_worker_control_plane_calls_total", MetricType::kCounter,
     "api,result", "api: ecs_agent,kubernetes; result: ok,failed",
     "Calls to the orchestrator's API, by API and result."},
    {"cfdb_worker_rpcs_total", MetricType::kCounter, "method,code",
     "method: the RPCs of rpcs.h, and unknown; code: gRPC's status code "
     "names",
     "Calls answered, by RPC and status code (codes seen only)."},
    {"cfdb_worker_admission_refusals_total", MetricType::kCounter,
     "method_group", "control,observe",
     "Calls refused by admission (mutual TLS), by the method's group."},
    {"cfdb_worker_build_info", MetricType::kGauge, "version", "VERSION",
     "1, labelled with the worker's version."},
    {"process_start_time_seconds", MetricType::kGauge, "", "",
     "Start time of the process since the Unix epoch in seconds."},
    {"process_cpu_seconds_total", MetricType::kCounter, "", "",
     "Total user and system CPU time spent in seconds."},
    {"process_resident_memory_bytes", MetricType::kGauge, "", "",
     "Resident memory size in bytes."},
    {"process_open_fds", MetricType::kGauge, "", "",
     "Number of open file descriptors."},
    {"process_max_fds", MetricType::kGauge, "", "",
     "Maximum number of open file descriptors."},
};

// The histograms' buckets (upper bounds, seconds). A job's start takes
// milliseconds when the machine is well (a fork and exec, a cgroup); the
// platform's jobs run from seconds to the 4 h cap, and a job without limit
// past it.
inline constexpr double kJobStartBuckets[] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
inline constexpr double kJobDurationBuckets[] = {
    1,    5,    15,   30,    60,    120,   300,  600,
    1800, 3600, 7200, 14400, 21600, 43200, 86400};

// JobHistograms are the two histograms, fed as jobs end (Worker::OnJobEnd).
// Thread-safe.
class JobHistograms {
 public:
  JobHistograms();
  void Observe(const Worker::JobTiming& timing);
  prometheus::ClientMetric start() const { return start_.Collect(); }
  prometheus::ClientMetric duration() const { return duration_.Collect(); }

 private:
  prometheus::Histogram start_;
  prometheus::Histogram duration_;
};

// MetricsReading is the worker as one scrape reads it.
struct MetricsReading {
  std::size_t in_flight = 0;
  std::size_t max_concurrent = 0;
  double idle_seconds = 0;
  JobCounts jobs;
  std::size_t retained = 0;
  bool draining = false;
  // Unix seconds (+Inf: no limit); none unless draining.
  std::optional<double> drain_deadline;
  // Unix seconds; none: the rule cannot apply now.
  std::optional<double> idle_retirement;
  std::optional<double> lifetime_retirement;
  // The idle polls and the listener checks (its lifetime_end is unused:
  // lifetime_retirement is it, on the wall clock).
  RetirementPolicy::Reading policy;
  bool scale_in_protected = false;
  uint64_t agent_calls_ok = 0;
  uint64_t agent_calls_failed = 0;
  // The Kubernetes API server's (the pod deletion cost).
  uint64_t kubernetes_calls_ok = 0;
  uint64_t kubernetes_calls_failed = 0;
  RpcCounts rpcs;
  std::string version;
  // Null: the histograms are empty.
  const JobHistograms* histograms = nullptr;
};

// ProcessReading is the process_* set, from /proc/self (zero where it
// cannot be read).
struct ProcessReading {
  double start_time_seconds = 0;
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
};
ProcessReading ReadProcess();

// RenderMetrics returns `worker` and `process` in the text exposition
// format, one family per row of kMetricTable, in its order.
std::string RenderMetrics(const MetricsReading& worker,
                          const ProcessReading& process);

}  // namespace cfdb::worker

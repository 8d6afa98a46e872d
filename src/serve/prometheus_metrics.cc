#include "serve/prometheus_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/text.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace cfdb::worker {
namespace {

// A sample: its labels' values (in the row's order) and its value.
struct Sample {
  std::vector<std::string> values;
  double value = 0;
};
using Samples = std::vector<Sample>;

double Flag(bool on) { return on ? 1 : 0; }

std::string CodeName(std::size_t code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// RpcSamples are the calls by RPC and code, the codes seen only.
Samples RpcSamples(const RpcCounts& rpcs) {
  Samples samples;
  for (std::size_t row = 0; row < rpcs.calls.size(); ++row) {
    const std::string method = row < std::size(kRpcs)
                                   ? std::string(kRpcs[row].name)
                                   : std::string("unknown");
    for (std::size_t code = 0; code < RpcCounts::kCodes; ++code) {
      if (const uint64_t n = rpcs.calls[row][code]; n > 0) {
        samples.push_back({{method, CodeName(code)}, double(n)});
      }
    }
  }
  return samples;
}

// RefusedSamples are Dispatch's refusals, by the code it answered.
Samples RefusedSamples(const RpcCounts& rpcs) {
  const auto& dispatch = rpcs.calls[static_cast<std::size_t>(Rpc::kDispatch)];
  const auto of = [&](absl::StatusCode code) {
    return double(dispatch[static_cast<std::size_t>(code)]);
  };
  return {{{"docket_full"}, of(absl::StatusCode::kResourceExhausted)},
          {{"stopping"}, of(absl::StatusCode::kUnavailable)},
          {{"duplicate_id"}, of(absl::StatusCode::kAlreadyExists)},
          {{"admission"}, of(absl::StatusCode::kPermissionDenied)},
          {{"bad_request"}, of(absl::StatusCode::kInvalidArgument)}};
}

// SamplesOf is each row's samples: the one place a metric gets its value.
Samples SamplesOf(const MetricRow& row, const MetricsReading& w,
                  const ProcessReading& p) {
  const std::string_view n = row.name;
  const auto one = [](double value) { return Samples{{{}, value}}; };
  if (n == "cfdb_worker_jobs_in_flight") return one(double(w.in_flight));
  if (n == "cfdb_worker_max_concurrent_jobs") {
    return one(double(w.max_concurrent));
  }
  if (n == "cfdb_worker_busy") return one(Flag(w.in_flight > 0));
  if (n == "cfdb_worker_idle_seconds") return one(w.idle_seconds);
  if (n == "cfdb_worker_jobs_started_total") return one(double(w.jobs.started));
  if (n == "cfdb_worker_jobs_finished_total") {
    Samples samples;
    for (std::size_t i = 0; i < kJobEndCount; ++i) {
      samples.push_back({{std::string(JobEndName(static_cast<JobEnd>(i)))},
                         double(w.jobs.ended[i])});
    }
    return samples;
  }
  if (n == "cfdb_worker_jobs_refused_total") return RefusedSamples(w.rpcs);
  if (n == "cfdb_worker_jobs_retained") return one(double(w.retained));
  if (n == "cfdb_worker_unread_results_evicted_total") {
    return one(double(w.jobs.unread_evicted));
  }
  if (n == "cfdb_worker_draining") return one(Flag(w.draining));
  if (n == "cfdb_worker_drain_deadline_timestamp_seconds") {
    return w.drain_deadline ? one(*w.drain_deadline) : Samples();
  }
  if (n == "cfdb_worker_job_output_buffered_bytes") {
    return one(double(w.jobs.output_buffered_bytes));
  }
  if (n == "cfdb_worker_job_output_dropped_bytes_total") {
    return one(double(w.jobs.output_dropped_bytes));
  }
  if (n == "cfdb_worker_retirement_timestamp_seconds") {
    Samples samples;
    if (w.idle_retirement) samples.push_back({{"idle"}, *w.idle_retirement});
    if (w.lifetime_retirement) {
      samples.push_back({{"max_lifetime"}, *w.lifetime_retirement});
    }
    return samples;
  }
  if (n == "cfdb_worker_idle_polls_total") {
    return {{{"answered"}, double(w.policy.polls_answered)},
            {{"failed"}, double(w.policy.polls_failed)}};
  }
  if (n == "cfdb_worker_listener_checks_total") {
    return {{{"answered"}, double(w.policy.listener_answered)},
            {{"unanswered"}, double(w.policy.listener_unanswered)},
            {{"unknown"}, double(w.policy.listener_unknown)}};
  }
  if (n == "cfdb_worker_listener_lost")
    return one(Flag(w.policy.listener_lost));
  if (n == "cfdb_worker_scale_in_protected") {
    return one(Flag(w.scale_in_protected));
  }
  if (n == "cfdb_worker_control_plane_calls_total") {
    return {{{"ecs_agent", "ok"}, double(w.agent_calls_ok)},
            {{"ecs_agent", "failed"}, double(w.agent_calls_failed)},
            {{"kubernetes", "ok"}, double(w.kubernetes_calls_ok)},
            {{"kubernetes", "failed"}, double(w.kubernetes_calls_failed)}};
  }
  if (n == "cfdb_worker_rpcs_total") return RpcSamples(w.rpcs);
  if (n == "cfdb_worker_admission_refusals_total") {
    return {{{"control"}, double(w.rpcs.admission_refusals[0])},
            {{"observe"}, double(w.rpcs.admission_refusals[1])}};
  }
  if (n == "cfdb_worker_build_info") return {{{w.version}, 1}};
  if (n == "process_start_time_seconds") return one(p.start_time_seconds);
  if (n == "process_cpu_seconds_total") return one(p.cpu_seconds);
  if (n == "process_resident_memory_bytes") return one(p.resident_bytes);
  if (n == "process_open_fds") return one(p.open_fds);
  if (n == "process_max_fds") return one(p.max_fds);
  return {};
}

// HistogramOf is a histogram row's one series.
std::optional<prometheus::ClientMetric> HistogramOf(const MetricRow& row,
                                                    const MetricsReading& w) {
  if (w.histograms == nullptr) {
    static const JobHistograms kEmpty;
    return HistogramOf(row, {.histograms = &kEmpty});
  }
  if (row.name == "cfdb_worker_job_start_seconds") {
    return w.histograms->start();
  }
  if (row.name == "cfdb_worker_job_duration_seconds") {
    return w.histograms->duration();
  }
  return std::nullopt;
}

std::string ReadWhole(const char* path) {
  return ReadFileText(path).value_or("");
}

// BootTime is the system's boot time in Unix seconds (/proc/stat's btime).
double BootTime() {
  std::istringstream stat(ReadWhole("/proc/stat"));
  std::string key;
  double value = 0;
  while (stat >> key) {
    if (key == "btime" && (stat >> value)) return value;
    stat.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

template <std::size_t N>
prometheus::Histogram::BucketBoundaries Bounds(const double (&bounds)[N]) {
  return {std::begin(bounds), std::end(bounds)};
}

}  // namespace

JobHistograms::JobHistograms()
    : start_(Bounds(kJobStartBuckets)),
      duration_(Bounds(kJobDurationBuckets)) {}

void JobHistograms::Observe(const Worker::JobTiming& timing) {
  start_.Observe(ToSeconds(timing.start));
  duration_.Observe(ToSeconds(timing.total));
}

ProcessReading ReadProcess() {
  ProcessReading p;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const std::string stat = ReadWhole("/proc/self/stat");
  // The fields after the command, which is in parentheses and may hold
  // blanks: state is field 3, utime 14, stime 15, starttime 22.
  if (const std::size_t close = stat.rfind(')');
      close != std::string::npos && ticks > 0) {
    const std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ');
    const auto field = [&](std::size_t number) {
      double value = 0;
      return number - 3 < fields.size() &&
                     absl::SimpleAtod(fields[number - 3], &value)
                 ? value
                 : 0.0;
    };
    p.cpu_seconds = (field(14) + field(15)) / ticks;
    p.start_time_seconds = BootTime() + field(22) / ticks;
  }
  std::istringstream statm(ReadWhole("/proc/self/statm"));
  double size = 0;
  double resident = 0;
  if (statm >> size >> resident) {
    p.resident_bytes = resident * static_cast<double>(sysconf(_SC_PAGESIZE));
  }
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end;
       !error && it != end; it.increment(error)) {
    ++p.open_fds;
  }
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    p.max_fds = static_cast<double>(limit.rlim_cur);
  }
  return p;
}

std::string RenderMetrics(const MetricsReading& worker,
                          const ProcessReading& process) {
  std::vector<prometheus::MetricFamily> families;
  families.reserve(std::size(kMetricTable));
  for (const MetricRow& row : kMetricTable) {
    prometheus::MetricFamily family;
    family.name = std::string(row.name);
    family.help = std::string(row.help);
    if (row.type == MetricType::kHistogram) {
      family.type = prometheus::MetricType::Histogram;
      if (std::optional<prometheus::ClientMetric> metric =
              HistogramOf(row, worker)) {
        family.metric.push_back(*std::move(metric));
      }
      families.push_back(std::move(family));
      continue;
    }
    family.type = row.type == MetricType::kCounter
                      ? prometheus::MetricType::Counter
                      : prometheus::MetricType::Gauge;
    const std::vector<std::string> labels =
        absl::StrSplit(absl::string_view(row.labels.data(), row.labels.size()),
                       ',', absl::SkipEmpty());
    for (Sample& sample : SamplesOf(row, worker, process)) {
      prometheus::ClientMetric metric;
      for (std::size_t i = 0; i < labels.size() && i < sample.values.size();
           ++i) {
        metric.label.push_back({labels[i], std::move(sample.values[i])});
      }
      (row.type == MetricType::kCounter ? metric.counter.value
                                        : metric.gauge.value) = sample.value;
      family.metric.push_back(std::move(metric));
    }
    families.push_back(std::move(family));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace cfdb::worker

#include "cfdb/worker/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cfdb::worker {
namespace {

std::string Fallback(double value) { return absl::StrCat(value); }

// The TLS knobs, shared by serve and the client commands.
const std::vector<Knob>& TlsKnobTable() {
  static const auto* knobs = new std::vector<Knob>{
      {"--tls-ca", "CFDB_WORKER_TLS_CA", "",
       "PEM file of the CA that signs workers and clients (mutual TLS)"},
      {"--tls-cert", "CFDB_WORKER_TLS_CERT", "",
       "PEM certificate chain this side presents"},
      {"--tls-key", "CFDB_WORKER_TLS_KEY", "", "PEM private key of --tls-cert"},
      {"--tls-identity", "CFDB_WORKER_TLS_IDENTITY", "",
       "SAN expected on the worker's certificate (empty: the dialled host)"},
      {"--tls-refresh-interval-seconds",
       "CFDB_WORKER_TLS_REFRESH_INTERVAL_SECONDS", "60",
       "how often certificate files are re-read, >= 1"},
  };
  return *knobs;
}

// The one list of serve's knobs, in the README's order.
const std::vector<Knob>& KnobTable() {
  static const auto* knobs = new std::vector<Knob>{
      {"--host", "CFDB_WORKER_HOST", "127.0.0.1",
       "address to listen on (0.0.0.0 for all IPv4 interfaces)"},
      {"--port", "CFDB_WORKER_PORT", "50051",
       "port to listen on, 0..65535 (0: pick a free port and log it)"},
      {"--idle-timeout-seconds", "CFDB_WORKER_IDLE_TIMEOUT_SECONDS",
       Fallback(kDefaultIdleTimeoutSeconds),
       "retire the worker after this long idle, >= 0 (0: never)"},
      {"--idle-poll-interval-seconds", "CFDB_WORKER_IDLE_POLL_INTERVAL_SECONDS",
       Fallback(kDefaultIdlePollIntervalSeconds),
       "time between idle polls, > 0"},
      {"--idle-poll-deadline-seconds", "CFDB_WORKER_IDLE_POLL_DEADLINE_SECONDS",
       Fallback(kDefaultIdlePollDeadlineSeconds),
       "deadline of one idle poll, > 0 and <= the interval (default: 5, or "
       "the interval if shorter)"},
      {"--idle-poll-failure-limit", "CFDB_WORKER_IDLE_POLL_FAILURE_LIMIT",
       absl::StrCat(kDefaultIdlePollFailureLimit),
       "stop polling after this many failed polls in a row, >= 1"},
      {"--max-lifetime-seconds", "CFDB_WORKER_MAX_LIFETIME_SECONDS",
       Fallback(kDefaultMaxLifetimeSeconds),
       "retire the worker this long after start, >= 0 (0: never)"},
      {"--max-lifetime-grace-seconds", "CFDB_WORKER_MAX_LIFETIME_GRACE_SECONDS",
       Fallback(kDefaultMaxLifetimeGraceSeconds),
       "drain grace of the idle and max-lifetime exits (< 0: no limit)"},
      {"--signal-grace-seconds", "CFDB_WORKER_SIGNAL_GRACE_SECONDS",
       Fallback(kDefaultSignalGraceSeconds),
       "drain grace on SIGTERM/SIGINT (0: cancel at once; < 0: no limit)"},
      {"--max-concurrent-tasks", "CFDB_WORKER_MAX_CONCURRENT_TASKS", "",
       "most jobs in flight at once, >= 1 (default: number of CPUs)"},
      {"--task-kill-grace-seconds", "CFDB_WORKER_TASK_KILL_GRACE_SECONDS",
       "10", "SIGTERM -> SIGKILL delay when a job is cancelled, >= 0"},
      {"--job-nice", "CFDB_WORKER_JOB_NICE",
       absl::StrCat(WorkerOptions{}.job_nice),
       "added to the nice value of jobs, 0..19, so Idle, Stop and health "
       "answers get the CPU first"},
      {"--log-level", "CFDB_WORKER_LOG_LEVEL", "info",
       "trace, debug, info, warn, error, critical or off"},
      {"--log-format", "CFDB_WORKER_LOG_FORMAT", "text",
       "text, or json: one JSON object per line (for CloudWatch)"},
      {"--allow-insecure", "CFDB_WORKER_ALLOW_INSECURE", "false",
       "allow plaintext on a non-loopback address", true},
  };
  static const auto* all = [] {
    auto* v = new std::vector<Knob>(*knobs);
    v->insert(v->end(), TlsKnobTable().begin(), TlsKnobTable().end());
    return v;
  }();
  return *all;
}

bool IsLoopback(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         host.starts_with("127.");
}

// Setting is one knob's text and where it came from.
struct Setting {
  std::string text;
  std::string source;  // the flag or variable, for messages
  bool explicit_value = false;
};

class Resolver {
 public:
  Resolver(const FlagValues& flags, const EnvLookup& env)
      : flags_(flags), env_(env) {}

  // Get returns the setting of `flag`: given flag, else variable, else
  // default.
  Setting Get(std::string_view flag) const {
    for (const Knob& knob : KnobTable()) {  // TLS knobs included
      if (knob.flag != flag) continue;
      if (auto it = flags_.find(flag); it != flags_.end()) {
        return {it->second, std::string(flag), true};
      }
      if (std::optional<std::string> value = env_(knob.variable)) {
        return {*value, std::string(knob.variable), true};
      }
      return {knob.fallback,
              absl::StrCat(std::string(flag), " (default)"), false};
    }
    return {};
  }

  // Seconds parses a finite number of seconds; negative only if allowed.
  absl::StatusOr<Duration> Seconds(std::string_view flag,
                                   bool allow_negative) const {
    const Setting s = Get(flag);
    double value = 0;
    if (!absl::SimpleAtod(s.text, &value)) return Bad(s, "is not a number");
    if (!std::isfinite(value)) return Bad(s, "is not a finite number");
    if (value < 0 && !allow_negative) return Bad(s, "is negative");
    return value < 0 ? Duration(-1) : ToDuration(cfdb::worker::Seconds(value));
  }

  absl::StatusOr<bool> Switch(std::string_view flag) const {
    const Setting s = Get(flag);
    bool value = false;
    if (!absl::SimpleAtob(s.text, &value)) {
      return Bad(s, "is not true or false");
    }
    return value;
  }

  absl::StatusOr<int64_t> Integer(std::string_view flag, int64_t min,
                                  int64_t max) const {
    const Setting s = Get(flag);
    int64_t value = 0;
    if (!absl::SimpleAtoi(s.text, &value)) {
      return Bad(s, "is not a whole number");
    }
    if (value < min || value > max) {
      return Bad(s, absl::StrCat("is outside ", min, "..", max));
    }
    return value;
  }

  static absl::Status Bad(const Setting& s, std::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.source, ": '", s.text, "' ", std::string(problem)));
  }

 private:
  const FlagValues& flags_;
  const EnvLookup& env_;
};

#define CFDB_ASSIGN(lhs, expr)              \
  do {                                      \
    auto value_or = (expr);                 \
    if (!value_or.ok()) return value_or.status(); \
    lhs = *value_or;                        \
  } while (0)

}  // namespace

std::span<const Knob> ServeKnobs() { return KnobTable(); }

std::span<const Knob> TlsKnobs() { return TlsKnobTable(); }

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<Credentials> ResolveCredentials(const FlagValues& flags,
                                               const EnvLookup& env) {
  const Resolver r(flags, env);
  TlsSettings tls;
  auto file = [&r](std::string_view flag) {
    const Setting s = r.Get(flag);
    return TlsSettings::File{s.text, s.explicit_value ? s.source
                                                      : std::string(flag)};
  };
  tls.ca = file("--tls-ca");
  tls.cert = file("--tls-cert");
  tls.key = file("--tls-key");
  tls.identity = r.Get("--tls-identity").text;
  CFDB_ASSIGN(tls.refresh_interval,
              r.Seconds("--tls-refresh-interval-seconds", false));
  return MakeCredentials(tls);
}

absl::StatusOr<ServeConfig> ResolveServeConfig(const FlagValues& flags,
                                              const EnvLookup& env) {
  const Resolver r(flags, env);
  ServeConfig c;
  const Setting host = r.Get("--host");
  if (host.text.empty()) return Resolver::Bad(host, "is empty");
  c.host = host.text;
  CFDB_ASSIGN(c.port, r.Integer("--port", 0, 65535));

  ReaperOptions& reaper = c.reaper;
  CFDB_ASSIGN(reaper.idle_timeout, r.Seconds("--idle-timeout-seconds", false));
  CFDB_ASSIGN(reaper.idle_poll_interval,
              r.Seconds("--idle-poll-interval-seconds", false));
  if (reaper.idle_poll_interval <= Duration::zero()) {
    return Resolver::Bad(r.Get("--idle-poll-interval-seconds"),
                         "must be greater than 0");
  }
  CFDB_ASSIGN(reaper.idle_poll_deadline,
              r.Seconds("--idle-poll-deadline-seconds", false));
  const Setting deadline = r.Get("--idle-poll-deadline-seconds");
  if (reaper.idle_poll_deadline <= Duration::zero()) {
    return Resolver::Bad(deadline, "must be greater than 0");
  }
  if (reaper.idle_poll_deadline > reaper.idle_poll_interval) {
    if (deadline.explicit_value) {
      return Resolver::Bad(
          deadline, absl::StrCat("is longer than the idle poll interval (",
                                 ToSeconds(reaper.idle_poll_interval), " s)"));
    }
    reaper.idle_poll_deadline = reaper.idle_poll_interval;
  }
  CFDB_ASSIGN(reaper.idle_poll_failure_limit,
              r.Integer("--idle-poll-failure-limit", 1, 1'000'000));
  CFDB_ASSIGN(reaper.max_lifetime, r.Seconds("--max-lifetime-seconds", false));
  CFDB_ASSIGN(reaper.max_lifetime_grace,
              r.Seconds("--max-lifetime-grace-seconds", true));
  CFDB_ASSIGN(reaper.signal_grace, r.Seconds("--signal-grace-seconds", true));

  if (r.Get("--max-concurrent-tasks").text.empty()) {
    c.worker.max_concurrent_tasks =
        std::max(1u, std::thread::hardware_concurrency());
  } else {
    CFDB_ASSIGN(c.worker.max_concurrent_tasks,
                r.Integer("--max-concurrent-tasks", 1, 100'000));
  }
  CFDB_ASSIGN(c.worker.task_kill_grace,
              r.Seconds("--task-kill-grace-seconds", false));
  CFDB_ASSIGN(c.worker.job_nice, r.Integer("--job-nice", 0, 19));

  const Setting level = r.Get("--log-level");
  static constexpr std::string_view kLevels[] = {
      "trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), level.text) ==
      std::end(kLevels)) {
    return Resolver::Bad(
        level, "is not one of trace, debug, info, warn, error, critical, off");
  }
  c.log_level = level.text;
  const Setting format = r.Get("--log-format");
  if (format.text != "text" && format.text != "json") {
    return Resolver::Bad(format, "is not text or json");
  }
  c.log_format = format.text == "json" ? LogFormat::kJson : LogFormat::kText;

  CFDB_ASSIGN(c.credentials, ResolveCredentials(flags, env));
  CFDB_ASSIGN(c.allow_insecure, r.Switch("--allow-insecure"));
  if (c.credentials.kind == Credentials::Kind::kInsecure &&
      !IsLoopback(c.host) && !c.allow_insecure) {
    return Resolver::Bad(
        host,
        "is not a loopback address, and without TLS anyone who reaches it "
        "could run programs on this worker and stop it: set --tls-ca, "
        "--tls-cert and --tls-key, or pass --allow-insecure");
  }
  return c;
}

}  // namespace cfdb::worker

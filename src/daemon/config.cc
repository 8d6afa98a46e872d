#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/drain.h"
#include "daemon/address.h"
#include "daemon/metrics.h"
#include "daemon/scale_in.h"
#include "rpc/san_match.h"
#include "rpc/tls_files.h"
#include "rpc/unix_socket.h"

namespace cfdb::worker {
namespace knob {
namespace {

using enum KnobScope;
using enum KnobType;

constexpr KnobRange kNonNegative{.min = 0};
constexpr KnobRange kPositive{.min = 0, .above_min = true};
constexpr KnobRange kAnyNumber{};
constexpr KnobRange Between(double min, double max) {
  return {.min = min, .max = max};
}

constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};
constexpr std::string_view kLogFormats[] = {"text", "json"};
constexpr std::string_view kContainments[] = {"auto", "cgroup", "subreaper"};

double SecondsOf(Duration d) { return ToSeconds(d); }

}  // namespace

const Knob kHost{.flag = "--host",
                 .variable = "CFDB_WORKER_HOST",
                 .fallback = std::string_view("127.0.0.1"),
                 .metavar = "HOST",
                 .help =
                     "address to listen on (0.0.0.0 for all IPv4 "
                     "interfaces)"};
const Knob kPort{.flag = "--port",
                 .variable = "CFDB_WORKER_PORT",
                 .type = kInteger,
                 .fallback = int64_t{50051},
                 .metavar = "PORT",
                 .help = "port to listen on (0: pick a free port and log it)",
                 .range = Between(0, 65535)};
const Knob kUds{.flag = "--uds",
                .variable = "CFDB_WORKER_UDS",
                .metavar = "PATH",
                .help =
                    "also listen on this Unix socket file, owner-only and "
                    "without TLS (a stale file is replaced, a live "
                    "worker's refused)"};
const Knob kWoolCompat{
    .flag = "--wool-compat",
    .variable = "CFDB_WORKER_WOOL_COMPAT",
    .type = kSwitch,
    .fallback = false,
    .help =
        "also serve idle and stop as wool.runtime.protobuf.wire.Worker, "
        "for the Python worker library's fleet tooling"};
const Knob kEcsScaleInProtection{
    .flag = "--ecs-scale-in-protection",
    .variable = "CFDB_WORKER_ECS_SCALE_IN_PROTECTION",
    .type = kSwitch,
    .fallback = false,
    .help =
        "protect the ECS task from scale-in while a job is in flight "
        "(needs ECS_AGENT_URI; for tasks of a service with auto scaling)"};
const Knob kEcsProtectionExpiresMinutes{
    .flag = "--ecs-protection-expires-minutes",
    .variable = "CFDB_WORKER_ECS_PROTECTION_EXPIRES_MINUTES",
    .type = kInteger,
    .fallback = int64_t{kDefaultProtectionExpiresMinutes},
    .metavar = "MINUTES",
    .help = "each protection's expiry, renewed at half of it while busy",
    .range = Between(1, kMaxProtectionExpiresMinutes)};
const Knob kEcsProtectionHoldSeconds{
    .flag = "--ecs-protection-hold-seconds",
    .variable = "CFDB_WORKER_ECS_PROTECTION_HOLD_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultProtectionHoldSeconds,
    .metavar = "SECONDS",
    .help =
        "keep the protection this long after the last job ends, so a job "
        "soon after costs no agent call (at most the idle timeout)",
    .range = kNonNegative};
const Knob kMetricsInterval{
    .flag = "--metrics-interval-seconds",
    .variable = "CFDB_WORKER_METRICS_INTERVAL_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultMetricsIntervalSeconds,
    .metavar = "SECONDS",
    .help =
        "with --log-format json, one CloudWatch EMF metrics line this "
        "often (0: none)",
    .range = {.min = 1, .or_zero = true}};
const Knob kMetricsService{
    .flag = "--metrics-service",
    .variable = "CFDB_WORKER_METRICS_SERVICE",
    .fallback = std::string_view("cfdb-worker"),
    .metavar = "NAME",
    .help = "the metrics' Service dimension (e.g. the stack's name)"};
const Knob kIdleTimeout{
    .flag = "--idle-timeout-seconds",
    .variable = "CFDB_WORKER_IDLE_TIMEOUT_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultIdleTimeoutSeconds,
    .metavar = "SECONDS",
    .help = "retire the worker after this long idle (0: never)",
    .range = kNonNegative};
const Knob kIdlePollInterval{
    .flag = "--idle-poll-interval-seconds",
    .variable = "CFDB_WORKER_IDLE_POLL_INTERVAL_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultIdlePollIntervalSeconds,
    .metavar = "SECONDS",
    .help = "time between idle polls",
    .range = kPositive};
const Knob kIdlePollDeadline{
    .flag = "--idle-poll-deadline-seconds",
    .variable = "CFDB_WORKER_IDLE_POLL_DEADLINE_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultIdlePollDeadlineSeconds,
    .metavar = "SECONDS",
    .help =
        "deadline of one idle poll, at most the interval (the interval "
        "when the default is longer)",
    .range = kPositive};
const Knob kIdlePollFailureLimit{
    .flag = "--idle-poll-failure-limit",
    .variable = "CFDB_WORKER_IDLE_POLL_FAILURE_LIMIT",
    .type = kInteger,
    .fallback = int64_t{kDefaultIdlePollFailureLimit},
    .metavar = "COUNT",
    .help =
        "after this many failed polls in a row, log one error and poll "
        "every fourth interval until a poll is answered",
    .range = Between(1, 1'000'000)};
const Knob kListenerCheckInterval{
    .flag = "--listener-check-interval-seconds",
    .variable = "CFDB_WORKER_LISTENER_CHECK_INTERVAL_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultListenerCheckIntervalSeconds,
    .metavar = "SECONDS",
    .help =
        "dial a new connection to the worker this often, whatever the "
        "idle timeout; 3 unanswered in a row: exit 1 (\"listener lost\")",
    .range = kPositive};
const Knob kMaxLifetime{
    .flag = "--max-lifetime-seconds",
    .variable = "CFDB_WORKER_MAX_LIFETIME_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultMaxLifetimeSeconds,
    .metavar = "SECONDS",
    .help = "retire the worker this long after start (0: never)",
    .range = kNonNegative};
const Knob kMaxLifetimeJitter{
    .flag = "--max-lifetime-jitter-seconds",
    .variable = "CFDB_WORKER_MAX_LIFETIME_JITTER_SECONDS",
    .type = kSeconds,
    .metavar = "SECONDS",
    .help =
        "retire up to this much before the max lifetime, drawn once at "
        "start; at most half the lifetime takes effect (0: exactly at it)",
    .range = kNonNegative,
    .default_note = "a tenth of the max lifetime"};
const Knob kMaxLifetimeGrace{
    .flag = "--max-lifetime-grace-seconds",
    .variable = "CFDB_WORKER_MAX_LIFETIME_GRACE_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultMaxLifetimeGraceSeconds,
    .metavar = "SECONDS",
    .help = "drain grace of the idle and max-lifetime exits (< 0: no limit)",
    .range = kAnyNumber};
const Knob kSignalGrace{
    .flag = "--signal-grace-seconds",
    .variable = "CFDB_WORKER_SIGNAL_GRACE_SECONDS",
    .type = kSeconds,
    .fallback = kDefaultSignalGraceSeconds,
    .metavar = "SECONDS",
    .help = "drain grace on SIGTERM/SIGINT (0: cancel at once; < 0: no limit)",
    .range = kAnyNumber};
const Knob kMaxConcurrentTasks{.flag = "--max-concurrent-tasks",
                               .variable = "CFDB_WORKER_MAX_CONCURRENT_TASKS",
                               .type = kInteger,
                               .metavar = "COUNT",
                               .help = "most jobs in flight at once",
                               .range = Between(1, 100'000),
                               .default_note = "number of CPUs"};
const Knob kTaskKillGrace{
    .flag = "--task-kill-grace-seconds",
    .variable = "CFDB_WORKER_TASK_KILL_GRACE_SECONDS",
    .type = kSeconds,
    .fallback = SecondsOf(WorkerOptions{}.task_kill_grace),
    .metavar = "SECONDS",
    .help = "SIGTERM -> SIGKILL delay when a job is cancelled",
    .range = kNonNegative};
const Knob kJobOutputBufferMib{
    .flag = "--job-output-buffer-mib",
    .variable = "CFDB_WORKER_JOB_OUTPUT_BUFFER_MIB",
    .type = kInteger,
    .fallback = int64_t{Job::kDefaultOutputBufferBytes >> 20},
    .metavar = "MIB",
    .help =
        "output kept per job for a client not attached or coming back; "
        "a job that fills it is paused (or drops its oldest output if "
        "asked)",
    .range = Between(1, 1024)};
const Knob kJobResultTtl{
    .flag = "--job-result-ttl-seconds",
    .variable = "CFDB_WORKER_JOB_RESULT_TTL_SECONDS",
    .type = kSeconds,
    .fallback = SecondsOf(WorkerOptions{}.result_ttl),
    .metavar = "SECONDS",
    .help =
        "how long a finished job's outcome and output stay for a client "
        "to read; idle retirement waits up to this for results of "
        "detached jobs",
    .range = kNonNegative};
const Knob kJobNice{.flag = "--job-nice",
                    .variable = "CFDB_WORKER_JOB_NICE",
                    .type = kInteger,
                    .fallback = int64_t{WorkerOptions{}.job_nice},
                    .metavar = "NICE",
                    .help =
                        "added to the nice value of jobs, so Idle, Stop "
                        "and health answers get the CPU first",
                    .range = Between(0, 19)};
const Knob kLogLevel{.flag = "--log-level",
                     .variable = "CFDB_WORKER_LOG_LEVEL",
                     .type = kChoice,
                     .fallback = std::string_view("info"),
                     .metavar = "LEVEL",
                     .help = "the least severe level logged",
                     .choices = kLogLevels};
const Knob kLogFormat{
    .flag = "--log-format",
    .variable = "CFDB_WORKER_LOG_FORMAT",
    .type = kChoice,
    .fallback = std::string_view("text"),
    .metavar = "FORMAT",
    .help = "json: one JSON object per line (for CloudWatch); text: for people",
    .choices = kLogFormats};
const Knob kJobUser{
    .flag = "--job-user",
    .variable = "CFDB_WORKER_JOB_USER",
    .metavar = "USER",
    .help =
        "run jobs as NAME, UID or UID:GID (one uid per job running at "
        "once, from that uid on), without privileges (default: as the "
        "worker, with a warning)"};
const Knob kWorkerUser{
    .flag = "--worker-user",
    .variable = "CFDB_WORKER_USER",
    .metavar = "USER",
    .help =
        "when started as root, become this user, keeping only what "
        "starting jobs as --job-user needs"};
const Knob kJobNproc{.flag = "--job-nproc",
                     .variable = "CFDB_WORKER_JOB_NPROC",
                     .type = kInteger,
                     .fallback = int64_t{1024},
                     .metavar = "COUNT",
                     .help =
                         "most processes each job's uid may have (0: the "
                         "worker's own limit); needs --job-user",
                     .range = Between(0, 1'000'000)};
const Knob kJobContainment{
    .flag = "--job-containment",
    .variable = "CFDB_WORKER_JOB_CONTAINMENT",
    .type = kChoice,
    .fallback = std::string_view("auto"),
    .metavar = "MODE",
    .help = "how a job's processes are made to end with it (docs/SECURITY.md)",
    .choices = kContainments};
const Knob kTlsAdmitControl{
    .flag = "--tls-admit-control",
    .variable = "CFDB_WORKER_TLS_ADMIT_CONTROL",
    .metavar = "NAMES",
    .help =
        "comma-separated client certificate identities (SAN DNS names, "
        "*.DOMAIN for one label, or URIs) that may call everything: "
        "Dispatch, Stop, Idle, health"};
const Knob kTlsAdmitObserve{
    .flag = "--tls-admit-observe",
    .variable = "CFDB_WORKER_TLS_ADMIT_OBSERVE",
    .metavar = "NAMES",
    .help =
        "comma-separated identities that may call Idle and health only "
        "(the worker's own, for its self-poll and health check, unless in "
        "the control list)"};
const Knob kAllowInsecure{.flag = "--allow-insecure",
                          .variable = "CFDB_WORKER_ALLOW_INSECURE",
                          .type = kSwitch,
                          .fallback = false,
                          .help = "allow plaintext on a non-loopback address"};

const Knob kTlsCa{
    .flag = "--tls-ca",
    .variable = "CFDB_WORKER_TLS_CA",
    .scope = kTls,
    .metavar = "PATH",
    .help = "PEM file of the CA that signs workers and clients (mutual TLS)"};
const Knob kTlsCert{.flag = "--tls-cert",
                    .variable = "CFDB_WORKER_TLS_CERT",
                    .scope = kTls,
                    .metavar = "PATH",
                    .help = "PEM certificate chain this side presents"};
const Knob kTlsKey{.flag = "--tls-key",
                   .variable = "CFDB_WORKER_TLS_KEY",
                   .scope = kTls,
                   .metavar = "PATH",
                   .help = "PEM private key of --tls-cert"};
const Knob kTlsCaEnv{.flag = "--tls-ca-env",
                     .variable = "CFDB_WORKER_TLS_CA_ENV",
                     .scope = kTls,
                     .metavar = "VARIABLE",
                     .help =
                         "a variable holding the CA PEM, instead of "
                         "--tls-ca (wiped from the environment once read)"};
const Knob kTlsCertEnv{.flag = "--tls-cert-env",
                       .variable = "CFDB_WORKER_TLS_CERT_ENV",
                       .scope = kTls,
                       .metavar = "VARIABLE",
                       .help =
                           "a variable holding the certificate PEM, "
                           "instead of --tls-cert (wiped once read)"};
const Knob kTlsKeyEnv{.flag = "--tls-key-env",
                      .variable = "CFDB_WORKER_TLS_KEY_ENV",
                      .scope = kTls,
                      .metavar = "VARIABLE",
                      .help =
                          "a variable holding the key PEM, instead of "
                          "--tls-key (wiped once read)"};
const Knob kTlsIdentity{
    .flag = "--tls-identity",
    .variable = "CFDB_WORKER_TLS_IDENTITY",
    .scope = kTls,
    .metavar = "NAME",
    .help =
        "SAN expected on the worker's certificate (empty: the dialled "
        "host)"};
const Knob kTlsRefreshInterval{
    .flag = "--tls-refresh-interval-seconds",
    .variable = "CFDB_WORKER_TLS_REFRESH_INTERVAL_SECONDS",
    .scope = kTls,
    .type = kSeconds,
    .fallback = 60.0,
    .metavar = "SECONDS",
    .help = "how often certificate files are re-read",
    .range = {.min = 1}};
const Knob kTlsCrlDir{.flag = "--tls-crl-dir",
                      .variable = "CFDB_WORKER_TLS_CRL_DIR",
                      .scope = kTls,
                      .metavar = "PATH",
                      .help =
                          "directory of hashed CRL files (openssl rehash) "
                          "enforced on every handshake"};

const Knob kAddress{.flag = "--address",
                    .variable = "CFDB_WORKER_ADDRESS",
                    .scope = kClient,
                    .fallback = std::string_view("127.0.0.1:50051"),
                    .metavar = "HOST:PORT",
                    .help =
                        "worker address (HOST:PORT, or unix:PATH for a "
                        "worker's --uds socket)"};
const Knob kAttempts{
    .flag = "--attempts",
    .variable = "CFDB_WORKER_ATTEMPTS",
    .scope = kClient,
    .type = kInteger,
    .fallback = int64_t{1},
    .metavar = "COUNT",
    .help =
        "retry transient errors until this many attempts, with a backoff "
        "from 0.5 s to 10 s (1: no retry)",
    .range = Between(1, 1000)};

}  // namespace knob

namespace {

// BadValue is the one wording of a refused value: "<flag or variable>:
// '<value>' <what is wrong>".
absl::Status BadValue(std::string_view source, std::string_view text,
                      std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": '",
                                                 std::string(text), "' ",
                                                 std::string(problem)));
}

// EditDistance is the Levenshtein distance of `a` and `b`.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

absl::StatusOr<double> ParseSecondsFlag(std::string_view flag,
                                        std::string_view text,
                                        SecondsRange range) {
  double value = 0;
  if (!absl::SimpleAtod(std::string(text), &value))
    return BadValue(flag, text, "is not a number");
  if (!std::isfinite(value))
    return BadValue(flag, text, "is not a finite number");
  if (range == SecondsRange::kNonNegative && value < 0)
    return BadValue(flag, text, "is negative");
  if (range == SecondsRange::kPositive && value <= 0)
    return BadValue(flag, text, "must be greater than 0");
  return value;
}

absl::StatusOr<int64_t> ParseIntegerFlag(std::string_view flag,
                                         std::string_view text, int64_t min,
                                         int64_t max) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(std::string(text), &value))
    return BadValue(flag, text, "is not a whole number");
  if (value < min || value > max) {
    return BadValue(flag, text, absl::StrCat("is outside ", min, "..", max));
  }
  return value;
}

std::optional<std::string> ClosestName(std::string_view given,
                                       std::span<const std::string> names) {
  // The start of one name only ("--idle-threshold"), at 4 letters or
  // more...
  std::optional<std::string> best;
  for (const std::string& name : names) {
    if (given.size() < 4 || name.size() <= given.size() ||
        !absl::StartsWith(name, std::string(given))) {
      continue;
    }
    if (best) {
      best.reset();
      break;
    }
    best = name;
  }
  if (best) return best;
  // ... or close to one: at most 2 edits, and fewer than a third of its
  // letters, so that "--x" suggests nothing.
  size_t best_distance = std::min<size_t>(3, given.size() / 3 + 1);
  for (const std::string& name : names) {
    const size_t distance = EditDistance(given, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

namespace {

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

  // Get returns the setting of `knob`: the flag given, else its variable
  // when set to something, else the default.
  Setting Get(const Knob& knob) const {
    if (auto it = flags_.find(knob.flag); it != flags_.end()) {
      return {it->second, std::string(knob.flag), true};
    }
    if (std::optional<std::string> value = env_(knob.variable);
        value.has_value() && !value->empty()) {
      return {*value, std::string(knob.variable), true};
    }
    return {KnobDefaultText(knob),
            absl::StrCat(std::string(knob.flag), " (default)"), false};
  }

  // Seconds, Switch, Integer and Choice read a knob of that type, checked
  // against its range (CheckKnobValue).
  absl::StatusOr<Duration> Seconds(const Knob& knob) const {
    const Setting s = Get(knob);
    if (absl::Status ok = CheckKnobValue(knob, s.source, s.text); !ok.ok())
      return ok;
    double value = 0;
    (void)absl::SimpleAtod(s.text, &value);
    const Duration d = GraceFromSeconds(value);
    // A positive number too small for a Duration is still no deadline.
    if (knob.range.above_min && d <= Duration::zero())
      return Bad(s, "must be greater than 0");
    return d;
  }

  absl::StatusOr<bool> Switch(const Knob& knob) const {
    const Setting s = Get(knob);
    if (absl::Status ok = CheckKnobValue(knob, s.source, s.text); !ok.ok())
      return ok;
    bool value = false;
    (void)absl::SimpleAtob(s.text, &value);
    return value;
  }

  absl::StatusOr<int64_t> Integer(const Knob& knob) const {
    const Setting s = Get(knob);
    if (absl::Status ok = CheckKnobValue(knob, s.source, s.text); !ok.ok())
      return ok;
    int64_t value = 0;
    (void)absl::SimpleAtoi(s.text, &value);
    return value;
  }

  absl::StatusOr<std::string> Choice(const Knob& knob) const {
    const Setting s = Get(knob);
    if (absl::Status ok = CheckKnobValue(knob, s.source, s.text); !ok.ok())
      return ok;
    return s.text;
  }

  // NonEmpty returns the text of `knob`, refusing an empty one.
  absl::StatusOr<std::string> NonEmpty(const Knob& knob) const {
    const Setting s = Get(knob);
    if (s.text.empty()) return Bad(s, "is empty");
    return s.text;
  }

  static absl::Status Bad(const Setting& s, std::string_view problem) {
    return BadValue(s.source, s.text, problem);
  }

 private:
  const FlagValues& flags_;
  const EnvLookup& env_;
};

#define CFDB_ASSIGN(lhs, expr)                    \
  do {                                            \
    auto value_or = (expr);                       \
    if (!value_or.ok()) return value_or.status(); \
    (lhs) = *value_or;                            \
  } while (0)

absl::Status ResolveRetirement(const Resolver& r, RetirementOptions& options) {
  CFDB_ASSIGN(options.idle_timeout, r.Seconds(knob::kIdleTimeout));
  CFDB_ASSIGN(options.idle_poll_interval, r.Seconds(knob::kIdlePollInterval));
  CFDB_ASSIGN(options.idle_poll_deadline, r.Seconds(knob::kIdlePollDeadline));
  const Setting deadline = r.Get(knob::kIdlePollDeadline);
  if (options.idle_poll_deadline > options.idle_poll_interval) {
    if (deadline.explicit_value) {
      return Resolver::Bad(
          deadline, absl::StrCat("is longer than the idle poll interval (",
                                 ToSeconds(options.idle_poll_interval), " s)"));
    }
    options.idle_poll_deadline = options.idle_poll_interval;
  }
  CFDB_ASSIGN(options.idle_poll_failure_limit,
              r.Integer(knob::kIdlePollFailureLimit));
  CFDB_ASSIGN(options.listener_check_interval,
              r.Seconds(knob::kListenerCheckInterval));
  CFDB_ASSIGN(options.max_lifetime, r.Seconds(knob::kMaxLifetime));
  const Setting jitter = r.Get(knob::kMaxLifetimeJitter);
  if (!jitter.explicit_value) {
    options.max_lifetime_jitter = ToDuration(Seconds(
        ToSeconds(options.max_lifetime) * kDefaultMaxLifetimeJitterFraction));
  } else {
    CFDB_ASSIGN(options.max_lifetime_jitter,
                r.Seconds(knob::kMaxLifetimeJitter));
  }
  CFDB_ASSIGN(options.max_lifetime_grace, r.Seconds(knob::kMaxLifetimeGrace));
  CFDB_ASSIGN(options.signal_grace, r.Seconds(knob::kSignalGrace));
  return absl::OkStatus();
}

absl::Status ResolveWorker(const Resolver& r, WorkerOptions& options) {
  if (!r.Get(knob::kMaxConcurrentTasks).explicit_value) {
    options.max_concurrent_tasks =
        std::max(1u, std::thread::hardware_concurrency());
  } else {
    CFDB_ASSIGN(options.max_concurrent_tasks,
                r.Integer(knob::kMaxConcurrentTasks));
  }
  CFDB_ASSIGN(options.task_kill_grace, r.Seconds(knob::kTaskKillGrace));
  CFDB_ASSIGN(options.job_nice, r.Integer(knob::kJobNice));
  int64_t buffer_mib = 0;
  CFDB_ASSIGN(buffer_mib, r.Integer(knob::kJobOutputBufferMib));
  options.output_buffer_bytes = static_cast<std::size_t>(buffer_mib) << 20;
  CFDB_ASSIGN(options.result_ttl, r.Seconds(knob::kJobResultTtl));
  return absl::OkStatus();
}

// A user knob's value; nullopt when unset.
absl::StatusOr<std::optional<User>> UserKnob(const Resolver& r,
                                             const Knob& knob) {
  const Setting s = r.Get(knob);
  if (s.text.empty()) return std::optional<User>();
  absl::StatusOr<User> user = ResolveUser(s.text);
  if (!user.ok()) return Resolver::Bad(s, std::string(user.status().message()));
  return std::optional<User>(*user);
}

// CheckJobUidsSpareTheWorker refuses a job user whose uids (one per job
// running at once) include the uid the worker runs as: such a job could
// read the worker's credentials and signal it.
absl::Status CheckJobUidsSpareTheWorker(const Resolver& r, const ServeConfig& c,
                                        const JobUser& job) {
  // BecomeWorker drops to --worker-user only when started as root.
  const uint64_t worker_uid =
      c.worker_user && geteuid() == 0 ? c.worker_user->uid : geteuid();
  const uint64_t first = job.uid;
  const uint64_t last = first + static_cast<uint64_t>(job.uids) - 1;
  if (worker_uid < first || worker_uid > last) return absl::OkStatus();
  return Resolver::Bad(
      r.Get(knob::kJobUser),
      absl::StrCat("gives jobs uids ", first, "..", last,
                   " (one per concurrent job), which include the worker's own "
                   "uid ",
                   worker_uid,
                   ": a job could read its credentials and signal it; give "
                   "jobs uids apart from the worker's"));
}

absl::Status ResolveSandbox(const Resolver& r, ServeConfig& c) {
  CFDB_ASSIGN(c.job_user, UserKnob(r, knob::kJobUser));
  CFDB_ASSIGN(c.worker_user, UserKnob(r, knob::kWorkerUser));
  int64_t nproc = 0;
  CFDB_ASSIGN(nproc, r.Integer(knob::kJobNproc));
  if (c.job_user) {
    const JobUser job{.uid = c.job_user->uid,
                      .gid = c.job_user->gid,
                      .uids = static_cast<int>(c.worker.max_concurrent_tasks),
                      .name = c.job_user->name};
    c.exec.user = job;
    c.exec.nproc = static_cast<rlim_t>(nproc);
    // Somewhere every uid of the job user may work.
    c.exec.default_cwd = "/tmp";
    if (absl::Status s = CheckJobUidsSpareTheWorker(r, c, job); !s.ok()) {
      return s;
    }
  }
  std::string mode;
  CFDB_ASSIGN(mode, r.Choice(knob::kJobContainment));
  c.containment = mode == "cgroup"      ? ContainmentMode::kCgroup
                  : mode == "subreaper" ? ContainmentMode::kSubreaper
                                        : ContainmentMode::kAuto;
  return absl::OkStatus();
}

// An identity list: comma-separated, blanks around names ignored.
absl::StatusOr<std::vector<std::string>> IdentityList(const Resolver& r,
                                                      const Knob& knob) {
  const Setting s = r.Get(knob);
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(s.text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (!std::all_of(part.begin(), part.end(),
                     [](char ch) { return ch > 0x20 && ch < 0x7f; })) {
      return Resolver::Bad(s, "holds a name that is not printable ASCII");
    }
    if (const std::string problem =
            AdmissionEntryProblem(std::string_view(part.data(), part.size()));
        !problem.empty()) {
      return Resolver::Bad(
          s, absl::StrCat("holds '", std::string(part), "', which ", problem,
                          ": it could never match"));
    }
    names.emplace_back(part);
  }
  return names;
}

absl::Status ResolveAdmission(const Resolver& r, ServeConfig& c) {
  CFDB_ASSIGN(c.admit.control, IdentityList(r, knob::kTlsAdmitControl));
  CFDB_ASSIGN(c.admit.observe, IdentityList(r, knob::kTlsAdmitObserve));
  if (!c.admit.empty() && c.credentials.kind != Credentials::Kind::kMutualTls) {
    return Resolver::Bad(
        r.Get(c.admit.control.empty() ? knob::kTlsAdmitObserve
                                      : knob::kTlsAdmitControl),
        "needs mutual TLS (--tls-ca, --tls-cert, --tls-key): without client "
        "certificates there is no identity to admit");
  }
  return absl::OkStatus();
}

// CheckSelfPoll proves, before listening, that the worker's self-poll can
// succeed with its own credentials (CheckServingSet), and keeps what it
// checked for the credential mirror, which checks every new set the same.
absl::Status CheckSelfPoll(const Resolver& r, ServeConfig& c) {
  if (c.credentials.kind != Credentials::Kind::kMutualTls) {
    return absl::OkStatus();
  }
  const Setting identity = r.Get(knob::kTlsIdentity);
  c.self_poll.host = c.tls.identity.empty()
                         ? HostOf(LoopbackTarget(c.host, c.port))
                         : c.tls.identity;
  c.self_poll.host_source = c.tls.identity.empty() ? "" : identity.source;
  if (!c.admit.empty()) {
    c.self_poll.idle_admitted = c.admit.control;
    c.self_poll.idle_admitted.insert(c.self_poll.idle_admitted.end(),
                                     c.admit.observe.begin(),
                                     c.admit.observe.end());
    const Setting observe = r.Get(knob::kTlsAdmitObserve);
    c.self_poll.admitted_source =
        observe.explicit_value ? observe.source
                               : std::string(knob::kTlsAdmitObserve.flag);
  }
  absl::StatusOr<PemSet> pems = ReadPemSet(c.tls);
  if (!pems.ok()) return pems.status();
  return CheckServingSet(c.tls, *pems, c.self_poll);
}

absl::Status ResolveLogging(const Resolver& r, ServeConfig& c) {
  CFDB_ASSIGN(c.log_level, r.Choice(knob::kLogLevel));
  std::string format;
  CFDB_ASSIGN(format, r.Choice(knob::kLogFormat));
  c.log_format = format == "json" ? LogFormat::kJson : LogFormat::kText;
  return absl::OkStatus();
}

}  // namespace

std::span<const Knob* const> AllKnobs() {
  using namespace knob;  // NOLINT: the table below names every knob
  static const Knob* const kAll[] = {&kHost,
                                     &kPort,
                                     &kUds,
                                     &kWoolCompat,
                                     &kEcsScaleInProtection,
                                     &kEcsProtectionExpiresMinutes,
                                     &kEcsProtectionHoldSeconds,
                                     &kMetricsInterval,
                                     &kMetricsService,
                                     &kIdleTimeout,
                                     &kIdlePollInterval,
                                     &kIdlePollDeadline,
                                     &kIdlePollFailureLimit,
                                     &kListenerCheckInterval,
                                     &kMaxLifetime,
                                     &kMaxLifetimeJitter,
                                     &kMaxLifetimeGrace,
                                     &kSignalGrace,
                                     &kMaxConcurrentTasks,
                                     &kTaskKillGrace,
                                     &kJobOutputBufferMib,
                                     &kJobResultTtl,
                                     &kJobNice,
                                     &kLogLevel,
                                     &kLogFormat,
                                     &kJobUser,
                                     &kWorkerUser,
                                     &kJobNproc,
                                     &kJobContainment,
                                     &kTlsAdmitControl,
                                     &kTlsAdmitObserve,
                                     &kAllowInsecure,
                                     &kTlsCa,
                                     &kTlsCert,
                                     &kTlsKey,
                                     &kTlsCaEnv,
                                     &kTlsCertEnv,
                                     &kTlsKeyEnv,
                                     &kTlsIdentity,
                                     &kTlsRefreshInterval,
                                     &kTlsCrlDir,
                                     &kAddress,
                                     &kAttempts};
  return kAll;
}

namespace {

std::vector<const Knob*> Select(std::initializer_list<KnobScope> scopes) {
  std::vector<const Knob*> knobs;
  for (const Knob* knob : AllKnobs()) {
    if (std::find(scopes.begin(), scopes.end(), knob->scope) != scopes.end())
      knobs.push_back(knob);
  }
  return knobs;
}

}  // namespace

std::span<const Knob* const> KnobsOf(KnobScope scope) {
  static const std::vector<const Knob*> kServe = Select({KnobScope::kServe});
  static const std::vector<const Knob*> kTls = Select({KnobScope::kTls});
  static const std::vector<const Knob*> kClient = Select({KnobScope::kClient});
  switch (scope) {
    case KnobScope::kServe:
      return kServe;
    case KnobScope::kTls:
      return kTls;
    case KnobScope::kClient:
      return kClient;
  }
  return {};
}

std::span<const Knob* const> ServeKnobs() {
  static const std::vector<const Knob*> kServe =
      Select({KnobScope::kServe, KnobScope::kTls});
  return kServe;
}

namespace {
std::string Number(double x);
}  // namespace

std::string KnobDefaultText(const Knob& knob) {
  struct Text {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t n) const { return absl::StrCat(n); }
    std::string operator()(double x) const { return Number(x); }
    std::string operator()(std::string_view t) const { return std::string(t); }
  };
  return std::visit(Text{}, knob.fallback);
}

namespace {

// Number writes a bound as people do: 1000000, not 1e+06.
std::string Number(double x) {
  if (x == std::floor(x) && std::abs(x) < 1e15)
    return absl::StrCat(static_cast<int64_t>(x));
  return absl::StrCat(x);
}

// Words joins `words` as "a, b or c".
std::string Words(std::span<const std::string_view> words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

std::string KnobRangeText(const Knob& knob) {
  const KnobRange& r = knob.range;
  switch (knob.type) {
    case KnobType::kText:
      return "";
    case KnobType::kSwitch:
      return "true or false";
    case KnobType::kChoice:
      return Words(knob.choices);
    case KnobType::kInteger:
    case KnobType::kSeconds:
      break;
  }
  const bool low = std::isfinite(r.min);
  const bool high = std::isfinite(r.max);
  std::string text;
  if (low && high && !r.above_min) {
    text = absl::StrCat(Number(r.min), "..", Number(r.max));
  } else if (low) {
    text = absl::StrCat(r.above_min ? "> " : ">= ", Number(r.min));
    if (high) absl::StrAppend(&text, ", <= ", Number(r.max));
  } else if (high) {
    text = absl::StrCat("<= ", Number(r.max));
  } else {
    text = "any number";
  }
  return r.or_zero ? absl::StrCat("0 or ", text) : text;
}

std::string KnobHelp(const Knob& knob) {
  std::string help(knob.help);
  if (const std::string range = KnobRangeText(knob);
      !range.empty() && knob.type != KnobType::kSwitch) {
    absl::StrAppend(&help, "; ", range);
  }
  if (!knob.default_note.empty()) {
    absl::StrAppend(&help, " (default: ", std::string(knob.default_note), ")");
  } else if (const std::string fallback = KnobDefaultText(knob);
             !fallback.empty() && knob.type != KnobType::kSwitch) {
    absl::StrAppend(&help, " (default ", fallback, ")");
  }
  return absl::StrCat(help, " [", std::string(knob.variable), "]");
}

absl::Status CheckKnobValue(const Knob& knob, std::string_view source,
                            std::string_view text) {
  const KnobRange& r = knob.range;
  switch (knob.type) {
    case KnobType::kText:
      return absl::OkStatus();
    case KnobType::kSwitch: {
      bool value = false;
      if (!absl::SimpleAtob(std::string(text), &value))
        return BadValue(source, text, "is not true or false");
      return absl::OkStatus();
    }
    case KnobType::kChoice:
      if (std::find(knob.choices.begin(), knob.choices.end(), text) ==
          knob.choices.end()) {
        return BadValue(source, text,
                        absl::StrCat("is not ", Words(knob.choices)));
      }
      return absl::OkStatus();
    case KnobType::kInteger: {
      absl::StatusOr<int64_t> value =
          ParseIntegerFlag(source, text, static_cast<int64_t>(r.min),
                           static_cast<int64_t>(r.max));
      return value.status();
    }
    case KnobType::kSeconds:
      break;
  }
  absl::StatusOr<double> value =
      ParseSecondsFlag(source, text, SecondsRange::kAny);
  if (!value.ok()) return value.status();
  const double x = *value;
  if (r.or_zero && x == 0) return absl::OkStatus();
  if (x < r.min || (r.above_min && x == r.min)) {
    if (r.min == 0) {
      return BadValue(source, text,
                      r.above_min ? "must be greater than 0" : "is negative");
    }
    if (r.or_zero) {
      return BadValue(
          source, text,
          absl::StrCat("is under ", Number(r.min), " s (0 turns it off)"));
    }
    return BadValue(source, text, absl::StrCat("is not ", KnobRangeText(knob)));
  }
  if (x > r.max) {
    return BadValue(source, text, absl::StrCat("is not ", KnobRangeText(knob)));
  }
  return absl::OkStatus();
}

std::string KnobTable(KnobScope scope) {
  std::string table =
      "| flag | variable | default | range | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const Knob* knob : KnobsOf(scope)) {
    std::string fallback = std::string(knob->default_note);
    if (fallback.empty()) fallback = KnobDefaultText(*knob);
    if (fallback.empty()) fallback = "none";
    if (knob->type != KnobType::kSeconds && knob->type != KnobType::kInteger &&
        fallback != "none" && knob->default_note.empty()) {
      fallback = absl::StrCat("`", fallback, "`");
    }
    std::string range = KnobRangeText(*knob);
    if (range.empty())
      range = absl::StrCat("`", std::string(knob->metavar), "`");
    absl::StrAppend(&table, "| `", std::string(knob->flag), "` | `",
                    std::string(knob->variable), "` | ", fallback, " | ", range,
                    " | ", std::string(knob->help), " |\n");
  }
  return table;
}

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    // Nothing in the worker sets variables, so getenv is safe here.
    // NOLINTNEXTLINE(concurrency-mt-unsafe)
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<TlsSettings> ResolveTlsSettings(const FlagValues& flags,
                                               const EnvLookup& env) {
  const Resolver r(flags, env);
  TlsSettings tls;
  // A file, or a variable holding the PEM: one of them.
  auto file = [&](const Knob& knob, const Knob& variable,
                  TlsSettings::File& out) -> absl::Status {
    const Setting s = r.Get(knob);
    const Setting v = r.Get(variable);
    if (s.explicit_value && s.text.empty()) return Resolver::Bad(s, "is empty");
    out = TlsSettings::File{
        s.text, s.explicit_value ? s.source : std::string(knob.flag)};
    if (v.text.empty()) return absl::OkStatus();
    if (!s.text.empty()) {
      return Resolver::Bad(
          v, absl::StrCat("is given with ", s.source, ": set one of them"));
    }
    std::optional<std::string> pem = env(v.text);
    if (!pem || pem->empty())
      return Resolver::Bad(v, "names a variable that is not set");
    out = TlsSettings::File{"", absl::StrCat(v.text, " (from ", v.source, ")"),
                            *pem};
    return absl::OkStatus();
  };
  if (absl::Status s = file(knob::kTlsCa, knob::kTlsCaEnv, tls.ca); !s.ok())
    return s;
  if (absl::Status s = file(knob::kTlsCert, knob::kTlsCertEnv, tls.cert);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = file(knob::kTlsKey, knob::kTlsKeyEnv, tls.key); !s.ok())
    return s;
  tls.identity = r.Get(knob::kTlsIdentity).text;
  tls.crl_directory = r.Get(knob::kTlsCrlDir).text;
  CFDB_ASSIGN(tls.refresh_interval, r.Seconds(knob::kTlsRefreshInterval));
  return tls;
}

absl::StatusOr<Credentials> ResolveCredentials(const FlagValues& flags,
                                               const EnvLookup& env) {
  absl::StatusOr<TlsSettings> tls = ResolveTlsSettings(flags, env);
  if (!tls.ok()) return tls.status();
  return MakeCredentials(*tls);
}

std::vector<std::string> SecretVariables(const FlagValues& flags,
                                         const EnvLookup& env) {
  const Resolver r(flags, env);
  std::vector<std::string> names;
  for (const Knob* knob :
       {&knob::kTlsCaEnv, &knob::kTlsCertEnv, &knob::kTlsKeyEnv}) {
    if (const std::string name = r.Get(*knob).text; !name.empty())
      names.push_back(name);
  }
  return names;
}

void WipeVariables(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): before any thread starts
    if (char* value = std::getenv(name.c_str())) {
      std::fill(value, value + std::strlen(value), '\0');
    }
    unsetenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): as above
  }
}

absl::StatusOr<ServeConfig> ResolveServeConfig(const FlagValues& flags,
                                               const EnvLookup& env) {
  const Resolver r(flags, env);
  ServeConfig c;
  CFDB_ASSIGN(c.host, r.NonEmpty(knob::kHost));
  CFDB_ASSIGN(c.port, r.Integer(knob::kPort));
  if (const Setting uds = r.Get(knob::kUds); !uds.text.empty()) {
    if (absl::Status s = CheckUnixSocketPath(uds.text); !s.ok()) {
      return Resolver::Bad(uds, std::string(s.message()));
    }
    c.unix_socket = uds.text;
  }
  CFDB_ASSIGN(c.wool_compat, r.Switch(knob::kWoolCompat));
  CFDB_ASSIGN(c.scale_in.enabled, r.Switch(knob::kEcsScaleInProtection));
  int64_t expires = 0;
  CFDB_ASSIGN(expires, r.Integer(knob::kEcsProtectionExpiresMinutes));
  c.scale_in.expires = std::chrono::minutes(expires);
  c.scale_in.agent_uri = env("ECS_AGENT_URI").value_or("");
  CFDB_ASSIGN(c.metrics_interval, r.Seconds(knob::kMetricsInterval));
  CFDB_ASSIGN(c.metrics_service, r.NonEmpty(knob::kMetricsService));
  if (absl::Status s = ResolveRetirement(r, c.retirement); !s.ok()) return s;
  CFDB_ASSIGN(c.scale_in.hold, r.Seconds(knob::kEcsProtectionHoldSeconds));
  // Past the idle timeout the worker has retired: no job can come.
  if (c.retirement.idle_timeout > Duration::zero()) {
    c.scale_in.hold = std::min(c.scale_in.hold, c.retirement.idle_timeout);
  }
  if (absl::Status s = ResolveWorker(r, c.worker); !s.ok()) return s;
  if (absl::Status s = ResolveLogging(r, c); !s.ok()) return s;
  if (absl::Status s = ResolveSandbox(r, c); !s.ok()) return s;
  CFDB_ASSIGN(c.tls, ResolveTlsSettings(flags, env));
  CFDB_ASSIGN(c.credentials, MakeCredentials(c.tls));
  if (absl::Status s = ResolveAdmission(r, c); !s.ok()) return s;
  if (absl::Status s = CheckSelfPoll(r, c); !s.ok()) return s;
  CFDB_ASSIGN(c.allow_insecure, r.Switch(knob::kAllowInsecure));
  if (c.credentials.kind == Credentials::Kind::kInsecure &&
      !IsLoopbackHost(c.host) && !c.allow_insecure) {
    return Resolver::Bad(
        r.Get(knob::kHost),
        "is not a loopback address (an IP literal of 127.0.0.0/8 or ::1, or "
        "localhost), and without TLS anyone who reaches it could run "
        "programs on this worker and stop it: set --tls-ca, --tls-cert and "
        "--tls-key, or pass --allow-insecure");
  }
  return c;
}

absl::StatusOr<ClientConfig> ResolveClientConfig(const FlagValues& flags,
                                                 const EnvLookup& env) {
  const Resolver r(flags, env);
  ClientConfig c;
  CFDB_ASSIGN(c.address, r.NonEmpty(knob::kAddress));
  CFDB_ASSIGN(c.attempts, r.Integer(knob::kAttempts));
  CFDB_ASSIGN(c.credentials, ResolveCredentials(flags, env));
  return c;
}

}  // namespace cfdb::worker

#include "serve/knobs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/rpcs.h"
#include "rpc/san_match.h"
#include "rpc/unix_socket.h"
#include "serve/address.h"
#include "serve/identity.h"
#include "serve/scale_in.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

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

// Defaults is the typed configuration's defaults, which the table's are.
const ServeConfig& Defaults() {
  static const ServeConfig kDefaults;
  return kDefaults;
}
double SecondsOf(Duration d) { return ToSeconds(d); }
int64_t Minutes(Duration d) {
  return std::chrono::duration_cast<std::chrono::minutes>(d).count();
}

// The observe list's help names the RPCs it admits, from the registry.
std::string_view ObserveHelp() {
  static const std::string kHelp = absl::StrCat(
      "comma-separated identities that may call the observe RPCs only (",
      RpcsOf(MethodGroup::kObserve),
      "; the worker's own, for its self-poll and health check, unless in "
      "the control list)");
  return kHelp;
}

// The setters that are more than a Read.
absl::Status SetUnixSocket(const Setting& s, ServeConfig& c) {
  if (s.text.empty()) return absl::OkStatus();
  if (absl::Status ok = CheckUnixSocketPath(s.text); !ok.ok()) {
    return s.Bad(std::string(ok.message()));
  }
  c.unix_socket = s.text;
  return absl::OkStatus();
}

absl::Status SetProtectionExpiry(const Setting& s, ServeConfig& c) {
  int minutes = 0;
  if (absl::Status ok = s.Read(minutes); !ok.ok()) return ok;
  c.scale_in.expires = std::chrono::minutes(minutes);
  return absl::OkStatus();
}

absl::Status SetOutputBuffer(const Setting& s, ServeConfig& c) {
  std::size_t mib = 0;
  if (absl::Status ok = s.Read(mib); !ok.ok()) return ok;
  c.worker.output_buffer_bytes = mib << 20;
  return absl::OkStatus();
}

absl::Status SetLogFormat(const Setting& s, ServeConfig& c) {
  c.log_format = s.text == "json" ? LogFormat::kJson : LogFormat::kText;
  return absl::OkStatus();
}

absl::Status SetContainment(const Setting& s, ServeConfig& c) {
  c.containment = s.text == "cgroup"      ? ContainmentMode::kCgroup
                  : s.text == "subreaper" ? ContainmentMode::kSubreaper
                                          : ContainmentMode::kAuto;
  return absl::OkStatus();
}

absl::Status SetUser(const Setting& s, std::optional<User>& out) {
  if (s.text.empty()) {
    out.reset();
    return absl::OkStatus();
  }
  absl::StatusOr<User> user = ResolveUser(s.text);
  if (!user.ok()) return s.Bad(std::string(user.status().message()));
  out = *std::move(user);
  return absl::OkStatus();
}

// An identity list: comma-separated, blanks around names ignored.
absl::Status SetIdentities(const Setting& s, std::vector<std::string>& out) {
  out.clear();
  for (absl::string_view part : absl::StrSplit(s.text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (!std::all_of(part.begin(), part.end(),
                     [](char ch) { return ch > 0x20 && ch < 0x7f; })) {
      return s.Bad("holds a name that is not printable ASCII");
    }
    if (const std::string problem =
            AdmissionEntryProblem(std::string_view(part.data(), part.size()));
        !problem.empty()) {
      return s.Bad(absl::StrCat("holds '", std::string(part), "', which ",
                                problem, ": it could never match"));
    }
    out.emplace_back(part);
  }
  return absl::OkStatus();
}

// A TLS file is a path (--tls-ca) or a variable holding the PEM
// (--tls-ca-env), not both; the path's row comes first.
absl::Status SetTlsFile(const Setting& s, TlsSettings::File& out) {
  if (s.text.empty()) return s.Bad("is empty");
  out.path = s.text;
  out.source = s.source;
  return absl::OkStatus();
}

absl::Status SetTlsVariable(const Setting& s, TlsSettings::File& out) {
  if (s.text.empty()) return absl::OkStatus();
  if (!out.path.empty()) {
    return s.Bad(
        absl::StrCat("is given with ", out.source, ": set one of them"));
  }
  std::optional<std::string> pem = (*s.env)(s.text);
  if (!pem || pem->empty()) return s.Bad("names a variable that is not set");
  out = TlsSettings::File{"", absl::StrCat(s.text, " (from ", s.source, ")"),
                          *std::move(pem)};
  return absl::OkStatus();
}

absl::Status SetAddress(const Setting& s, ClientConfig& c) {
  if (!s.text.empty() && !TargetHasPort(s.text)) {
    return s.Bad(absl::StrCat("has no port (", std::string(kTargetForms), ")"));
  }
  return s.NonEmpty(c.address);
}

}  // namespace

// The table. A new knob is a row here and its field in ServeConfig (or
// TlsSettings, ClientConfig); the docs' tables are generated from it.
std::span<const Knob> AllKnobs() {
  static const Knob kKnobs[] = {
      {.flag = "--host",
       .variable = "CFDB_WORKER_HOST",
       .fallback = std::string_view(Defaults().host),
       .metavar = "HOST",
       .help = "address to listen on (0.0.0.0 for all IPv4 "
               "interfaces)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.NonEmpty(c.host); }},
      {.flag = "--port",
       .variable = "CFDB_WORKER_PORT",
       .type = kInteger,
       .fallback = int64_t{Defaults().port},
       .metavar = "PORT",
       .help = "port to listen on (0: pick a free port and log it)",
       .range = Between(0, 65535),
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.port); }},
      {.flag = "--http-port",
       .variable = "CFDB_WORKER_HTTP_PORT",
       .type = kInteger,
       .fallback = int64_t{Defaults().http_port},
       .metavar = "PORT",
       .help = "plain-HTTP port for /metrics, /healthz and /readyz (-1: "
               "none; 0: pick a free port and log it)",
       .range = Between(-1, 65535),
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.http_port); }},
      {.flag = "--http-host",
       .variable = "CFDB_WORKER_HTTP_HOST",
       .fallback = std::string_view(Defaults().http_host),
       .metavar = "HOST",
       .help = "address the HTTP port listens on (empty: --host's)",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             c.http_host = s.text;
             return absl::OkStatus();
           }},
      {.flag = "--uds",
       .variable = "CFDB_WORKER_UDS",
       .metavar = "PATH",
       .help = "also listen on this Unix socket file, owner-only and "
               "without TLS (a stale file is replaced, a live "
               "worker's refused)",
       .serve = &SetUnixSocket},
      {.flag = "--wool-compat",
       .variable = "CFDB_WORKER_WOOL_COMPAT",
       .type = kSwitch,
       .fallback = false,
       .help = "also serve idle and stop as wool.runtime.protobuf.wire.Worker, "
               "for the Python worker library's fleet tooling",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.wool_compat); }},
      {.flag = "--ecs-scale-in-protection",
       .variable = "CFDB_WORKER_ECS_SCALE_IN_PROTECTION",
       .type = kSwitch,
       .fallback = false,
       .help =
           "protect the ECS task from scale-in while a job is in flight "
           "(needs ECS_AGENT_URI; for tasks of a service with auto scaling)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.scale_in.enabled); }},
      {.flag = "--ecs-protection-expires-minutes",
       .variable = "CFDB_WORKER_ECS_PROTECTION_EXPIRES_MINUTES",
       .type = kInteger,
       .fallback = Minutes(Defaults().scale_in.expires),
       .metavar = "MINUTES",
       .help = "each protection's expiry, renewed at half of it while busy",
       .range = Between(1, kMaxProtectionExpiresMinutes),
       .serve = &SetProtectionExpiry},
      {.flag = "--ecs-protection-hold-seconds",
       .variable = "CFDB_WORKER_ECS_PROTECTION_HOLD_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().scale_in.hold),
       .metavar = "SECONDS",
       .help =
           "keep the protection this long after the last job ends, so a job "
           "soon after costs no agent call (at most the idle timeout)",
       .range = kNonNegative,
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.scale_in.hold); }},
      {.flag = "--k8s-deletion-cost",
       .variable = "CFDB_WORKER_K8S_DELETION_COST",
       .type = kSwitch,
       .fallback = false,
       .help = "mark the worker's own pod busy while a job is in flight "
               "(pod-deletion-cost, karpenter.sh/do-not-disrupt) through "
               "the Kubernetes API; needs POD_NAME and a service account "
               "that may patch pods (docs/KUBERNETES.md)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.deletion_cost.enabled); }},
      {.flag = "--k8s-safe-to-evict",
       .variable = "CFDB_WORKER_K8S_SAFE_TO_EVICT",
       .type = kSwitch,
       .fallback = Defaults().deletion_cost.safe_to_evict,
       .help = "with --k8s-deletion-cost, also mark the pod for the cluster "
               "autoscaler: cluster-autoscaler.kubernetes.io/safe-to-evict "
               "\"false\" while busy, \"true\" when idle",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.deletion_cost.safe_to_evict);
           }},
      {.flag = "--k8s-busy-deletion-cost",
       .variable = "CFDB_WORKER_K8S_BUSY_DELETION_COST",
       .type = kInteger,
       .fallback = Defaults().deletion_cost.busy_cost,
       .metavar = "COST",
       .help = "the pod's controller.kubernetes.io/pod-deletion-cost while "
               "busy (0 when idle)",
       .range = Between(0, 2147483647),
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.deletion_cost.busy_cost);
           }},
      {.flag = "--k8s-hold-seconds",
       .variable = "CFDB_WORKER_K8S_HOLD_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().deletion_cost.hold),
       .metavar = "SECONDS",
       .help = "keep the pod marked busy this long after the last job ends, "
               "so a job soon after costs no API call (at most the idle "
               "timeout)",
       .range = kNonNegative,
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.deletion_cost.hold); }},
      {.flag = "--k8s-service-account-dir",
       .variable = "CFDB_WORKER_K8S_SERVICE_ACCOUNT_DIR",
       .fallback = std::string_view(kServiceAccountDir),
       .metavar = "PATH",
       .help = "the pod's service account folder (token, ca.crt, namespace)",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.NonEmpty(c.deletion_cost.service_account_dir);
           }},
      {.flag = "--metrics-interval-seconds",
       .variable = "CFDB_WORKER_METRICS_INTERVAL_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().metrics_interval),
       .metavar = "SECONDS",
       .help = "with --log-format json, one CloudWatch EMF metrics line this "
               "often (0: none)",
       .range = {.min = 1, .or_zero = true},
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.metrics_interval); }},
      {.flag = "--metrics-service",
       .variable = "CFDB_WORKER_METRICS_SERVICE",
       .fallback = std::string_view(Defaults().metrics_service),
       .metavar = "NAME",
       .help = "the metrics' Service dimension (e.g. the stack's name)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.NonEmpty(c.metrics_service); }},
      {.flag = "--idle-timeout-seconds",
       .variable = "CFDB_WORKER_IDLE_TIMEOUT_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.idle_timeout),
       .metavar = "SECONDS",
       .help = "retire the worker after this long idle (0: never)",
       .range = kNonNegative,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.idle_timeout);
           }},
      {.flag = "--idle-poll-interval-seconds",
       .variable = "CFDB_WORKER_IDLE_POLL_INTERVAL_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.idle_poll_interval),
       .metavar = "SECONDS",
       .help = "time between idle polls",
       .range = kPositive,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.idle_poll_interval);
           }},
      {.flag = "--idle-poll-deadline-seconds",
       .variable = "CFDB_WORKER_IDLE_POLL_DEADLINE_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.idle_poll_deadline),
       .metavar = "SECONDS",
       .help = "deadline of one idle poll, at most the interval (the interval "
               "when the default is longer)",
       .range = kPositive,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.idle_poll_deadline);
           }},
      {.flag = "--idle-poll-failure-limit",
       .variable = "CFDB_WORKER_IDLE_POLL_FAILURE_LIMIT",
       .type = kInteger,
       .fallback = int64_t{Defaults().retirement.idle_poll_failure_limit},
       .metavar = "COUNT",
       .help = "after this many failed polls in a row, log one error and poll "
               "every fourth interval until a poll is answered",
       .range = Between(1, 1'000'000),
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.idle_poll_failure_limit);
           }},
      {.flag = "--listener-check-interval-seconds",
       .variable = "CFDB_WORKER_LISTENER_CHECK_INTERVAL_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.listener_check_interval),
       .metavar = "SECONDS",
       .help =
           "dial a new connection to the worker this often, whatever the "
           "idle timeout; 3 unanswered in a row: exit 1 (\"listener lost\")",
       .range = kPositive,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.listener_check_interval);
           }},
      {.flag = "--max-lifetime-seconds",
       .variable = "CFDB_WORKER_MAX_LIFETIME_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.max_lifetime),
       .metavar = "SECONDS",
       .help = "retire the worker this long after start (0: never)",
       .range = kNonNegative,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.max_lifetime);
           }},
      {.flag = "--max-lifetime-jitter-seconds",
       .variable = "CFDB_WORKER_MAX_LIFETIME_JITTER_SECONDS",
       .type = kSeconds,
       .metavar = "SECONDS",
       .help =
           "retire up to this much before the max lifetime, drawn once at "
           "start; at most half the lifetime takes effect (0: exactly at it)",
       .range = kNonNegative,
       .default_note = "a tenth of the max lifetime",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.max_lifetime_jitter);
           }},
      {.flag = "--max-lifetime-grace-seconds",
       .variable = "CFDB_WORKER_MAX_LIFETIME_GRACE_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.max_lifetime_grace),
       .metavar = "SECONDS",
       .help = "drain grace of the idle and max-lifetime exits (< 0: no limit)",
       .range = kAnyNumber,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.max_lifetime_grace);
           }},
      {.flag = "--signal-grace-seconds",
       .variable = "CFDB_WORKER_SIGNAL_GRACE_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().retirement.signal_grace),
       .metavar = "SECONDS",
       .help =
           "drain grace on SIGTERM/SIGINT (0: cancel at once; < 0: no limit)",
       .range = kAnyNumber,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.retirement.signal_grace);
           }},
      {.flag = "--max-concurrent-tasks",
       .variable = "CFDB_WORKER_MAX_CONCURRENT_TASKS",
       .type = kInteger,
       .metavar = "COUNT",
       .help = "most jobs in flight at once",
       .range = Between(1, 100'000),
       .default_note = "number of CPUs",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.worker.max_concurrent_tasks);
           }},
      {.flag = "--task-kill-grace-seconds",
       .variable = "CFDB_WORKER_TASK_KILL_GRACE_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().worker.task_kill_grace),
       .metavar = "SECONDS",
       .help = "SIGTERM -> SIGKILL delay when a job is cancelled",
       .range = kNonNegative,
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return s.Read(c.worker.task_kill_grace);
           }},
      {.flag = "--job-output-buffer-mib",
       .variable = "CFDB_WORKER_JOB_OUTPUT_BUFFER_MIB",
       .type = kInteger,
       .fallback = int64_t{static_cast<int64_t>(
           Defaults().worker.output_buffer_bytes >> 20)},
       .metavar = "MIB",
       .help = "output kept per job for a client not attached or coming back; "
               "a job that fills it is paused (or drops its oldest output if "
               "asked)",
       .range = Between(1, 1024),
       .serve = &SetOutputBuffer},
      {.flag = "--job-result-ttl-seconds",
       .variable = "CFDB_WORKER_JOB_RESULT_TTL_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().worker.result_ttl),
       .metavar = "SECONDS",
       .help = "how long a finished job's outcome and output stay for a client "
               "to read; idle retirement waits up to this for results of "
               "detached jobs",
       .range = kNonNegative,
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.worker.result_ttl); }},
      {.flag = "--job-nice",
       .variable = "CFDB_WORKER_JOB_NICE",
       .type = kInteger,
       .fallback = int64_t{Defaults().worker.job_nice},
       .metavar = "NICE",
       .help = "added to the nice value of jobs, so Idle, Stop "
               "and health answers get the CPU first",
       .range = Between(0, 19),
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.worker.job_nice); }},
      {.flag = "--log-level",
       .variable = "CFDB_WORKER_LOG_LEVEL",
       .type = kChoice,
       .fallback = std::string_view(Defaults().log_level),
       .metavar = "LEVEL",
       .help = "the least severe level logged",
       .choices = kLogLevels,
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.log_level); }},
      {.flag = "--log-format",
       .variable = "CFDB_WORKER_LOG_FORMAT",
       .type = kChoice,
       .fallback = std::string_view("text"),
       .metavar = "FORMAT",
       .help =
           "json: one JSON object per line (for CloudWatch); text: for people",
       .choices = kLogFormats,
       .serve = &SetLogFormat},
      {.flag = "--job-user",
       .variable = "CFDB_WORKER_JOB_USER",
       .metavar = "USER",
       .help = "run jobs as NAME, UID or UID:GID (one uid per job running at "
               "once, from that uid on), without privileges (default: as the "
               "worker, with a warning)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return SetUser(s, c.job_user); }},
      {.flag = "--worker-user",
       .variable = "CFDB_WORKER_USER",
       .metavar = "USER",
       .help = "when started as root, become this user, keeping only what "
               "starting jobs as --job-user needs",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return SetUser(s, c.worker_user); }},
      {.flag = "--job-nproc",
       .variable = "CFDB_WORKER_JOB_NPROC",
       .type = kInteger,
       .fallback = int64_t{Defaults().job_nproc},
       .metavar = "COUNT",
       .help = "most processes each job's uid may have (0: the "
               "worker's own limit); needs --job-user",
       .range = Between(0, 1'000'000),
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.job_nproc); }},
      {.flag = "--job-containment",
       .variable = "CFDB_WORKER_JOB_CONTAINMENT",
       .type = kChoice,
       .fallback = std::string_view("auto"),
       .metavar = "MODE",
       .help =
           "how a job's processes are made to end with it (docs/SECURITY.md)",
       .choices = kContainments,
       .serve = &SetContainment},
      {.flag = "--tls-admit-control",
       .variable = "CFDB_WORKER_TLS_ADMIT_CONTROL",
       .metavar = "NAMES",
       .help = "comma-separated client certificate identities (SAN DNS names, "
               "*.DOMAIN for one label, or URIs) that may call every RPC",
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return SetIdentities(s, c.admit.control);
           }},
      {.flag = "--tls-admit-observe",
       .variable = "CFDB_WORKER_TLS_ADMIT_OBSERVE",
       .metavar = "NAMES",
       .help = ObserveHelp(),
       .serve =
           [](const Setting& s, ServeConfig& c) {
             return SetIdentities(s, c.admit.observe);
           }},
      {.flag = "--tls-admit-admin",
       .variable = "CFDB_WORKER_TLS_ADMIT_ADMIN",
       .metavar = "NAMES",
       .help = "comma-separated identities that may call every RPC on every "
               "job, other identities' jobs too (docs/SECURITY.md)",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return SetIdentities(s, c.admit.admin); }},
      {.flag = "--allow-insecure",
       .variable = "CFDB_WORKER_ALLOW_INSECURE",
       .type = kSwitch,
       .fallback = false,
       .help = "allow plaintext on a non-loopback address",
       .serve = [](const Setting& s,
                   ServeConfig& c) { return s.Read(c.allow_insecure); }},
      {.flag = "--tls-ca",
       .variable = "CFDB_WORKER_TLS_CA",
       .metavar = "PATH",
       .help = "PEM file of the CA that signs workers and clients (mutual TLS)",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsFile(s, t.ca); }},
      {.flag = "--tls-cert",
       .variable = "CFDB_WORKER_TLS_CERT",
       .metavar = "PATH",
       .help = "PEM certificate chain this side presents",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsFile(s, t.cert); }},
      {.flag = "--tls-key",
       .variable = "CFDB_WORKER_TLS_KEY",
       .metavar = "PATH",
       .help = "PEM private key of --tls-cert",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsFile(s, t.key); }},
      {.flag = "--tls-ca-env",
       .variable = "CFDB_WORKER_TLS_CA_ENV",
       .metavar = "VARIABLE",
       .help = "a variable holding the CA PEM, instead of "
               "--tls-ca (wiped from the environment once read)",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsVariable(s, t.ca); }},
      {.flag = "--tls-cert-env",
       .variable = "CFDB_WORKER_TLS_CERT_ENV",
       .metavar = "VARIABLE",
       .help = "a variable holding the certificate PEM, "
               "instead of --tls-cert (wiped once read)",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsVariable(s, t.cert); }},
      {.flag = "--tls-key-env",
       .variable = "CFDB_WORKER_TLS_KEY_ENV",
       .metavar = "VARIABLE",
       .help = "a variable holding the key PEM, instead of "
               "--tls-key (wiped once read)",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return SetTlsVariable(s, t.key); }},
      {.flag = "--tls-identity",
       .variable = "CFDB_WORKER_TLS_IDENTITY",
       .metavar = "NAME",
       .help = "SAN expected on the worker's certificate (empty: the dialled "
               "host)",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return s.Read(t.identity); }},
      {.flag = "--tls-refresh-interval-seconds",
       .variable = "CFDB_WORKER_TLS_REFRESH_INTERVAL_SECONDS",
       .type = kSeconds,
       .fallback = SecondsOf(Defaults().tls.refresh_interval),
       .metavar = "SECONDS",
       .help = "how often certificate files are re-read",
       .range = {.min = 1},
       .tls = [](const Setting& s,
                 TlsSettings& t) { return s.Read(t.refresh_interval); }},
      {.flag = "--tls-crl-dir",
       .variable = "CFDB_WORKER_TLS_CRL_DIR",
       .metavar = "PATH",
       .help = "directory of hashed CRL files (openssl rehash) "
               "enforced on every handshake",
       .tls = [](const Setting& s,
                 TlsSettings& t) { return s.Read(t.crl_directory); }},
      {.flag = "--address",
       .variable = "CFDB_WORKER_ADDRESS",
       .fallback = std::string_view("127.0.0.1:50051"),
       .metavar = "HOST:PORT",
       .help = "worker address (HOST:PORT, or unix:PATH for a "
               "worker's --uds socket)",
       .client = &SetAddress},
      {.flag = "--attempts",
       .variable = "CFDB_WORKER_ATTEMPTS",
       .type = kInteger,
       .fallback = int64_t{ClientConfig{}.attempts},
       .metavar = "COUNT",
       .help =
           "retry transient errors until this many attempts, with a backoff "
           "from 0.5 s to 10 s (1: no retry)",
       .range = Between(1, 1000),
       .client = [](const Setting& s,
                    ClientConfig& c) { return s.Read(c.attempts); }},
  };
  return kKnobs;
}

std::vector<const Knob*> KnobsOf(KnobScope scope) {
  std::vector<const Knob*> knobs;
  for (const Knob& knob : AllKnobs()) {
    if (knob.scope() == scope) knobs.push_back(&knob);
  }
  return knobs;
}

std::vector<const Knob*> ServeKnobs() {
  std::vector<const Knob*> knobs = KnobsOf(KnobScope::kServe);
  for (const Knob* knob : KnobsOf(KnobScope::kTls)) knobs.push_back(knob);
  return knobs;
}

const Knob& KnobNamed(std::string_view flag) {
  for (const Knob& knob : AllKnobs()) {
    if (knob.flag == flag) return knob;
  }
  spdlog::critical("no knob {}", flag);
  std::abort();
}

std::optional<bool> ParseSwitch(std::string_view text) {
  const std::string lower =
      absl::AsciiStrToLower(absl::string_view(text.data(), text.size()));
  for (std::string_view word : kSwitchTrue) {
    if (lower == word) return true;
  }
  for (std::string_view word : kSwitchFalse) {
    if (lower == word) return false;
  }
  return std::nullopt;
}

absl::Status BadValue(std::string_view source, std::string_view text,
                      std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": '",
                                                 std::string(text), "' ",
                                                 std::string(problem)));
}

absl::Status Setting::Bad(std::string_view problem) const {
  return BadValue(source, text, problem);
}

absl::Status Setting::Read(Duration& out) const {
  double value = 0;
  (void)absl::SimpleAtod(text, &value);
  const Duration d = GraceFromSeconds(value);
  // A positive number too small for a Duration is still no deadline.
  if (knob->range.above_min && d <= Duration::zero()) {
    return Bad("must be greater than 0");
  }
  out = d;
  return absl::OkStatus();
}

absl::Status Setting::Read(int& out) const {
  int64_t value = 0;
  (void)absl::SimpleAtoi(text, &value);
  out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status Setting::Read(std::size_t& out) const {
  int64_t value = 0;
  (void)absl::SimpleAtoi(text, &value);
  out = static_cast<std::size_t>(value);
  return absl::OkStatus();
}

absl::Status Setting::Read(bool& out) const {
  out = ParseSwitch(text).value_or(false);
  return absl::OkStatus();
}

absl::Status Setting::Read(std::string& out) const {
  out = text;
  return absl::OkStatus();
}

absl::Status Setting::NonEmpty(std::string& out) const {
  if (text.empty()) return Bad("is empty");
  out = text;
  return absl::OkStatus();
}

Setting Settings::Get(const Knob& knob) const {
  if (auto it = flags_.find(knob.flag); it != flags_.end()) {
    return {&knob, it->second, std::string(knob.flag), true, &env_};
  }
  if (std::optional<std::string> value = env_(knob.variable);
      value.has_value() && !value->empty()) {
    return {&knob, *value, std::string(knob.variable), true, &env_};
  }
  return {&knob, KnobDefaultText(knob),
          absl::StrCat(std::string(knob.flag), " (default)"), false, &env_};
}

template <typename Target, typename Setter>
absl::Status Settings::ApplyAll(Target& target, Setter Knob::*setter) const {
  for (const Knob& knob : AllKnobs()) {
    if (knob.*setter == nullptr) continue;
    const Setting s = Get(knob);
    // Unset, without a default: the configuration's own stays.
    if (!s.explicit_value && s.text.empty()) continue;
    if (absl::Status ok = CheckKnobValue(knob, s.source, s.text); !ok.ok()) {
      return ok;
    }
    if (absl::Status ok = (knob.*setter)(s, target); !ok.ok()) return ok;
  }
  return absl::OkStatus();
}

absl::Status Settings::Apply(ServeConfig& target) const {
  return ApplyAll(target, &Knob::serve);
}
absl::Status Settings::Apply(TlsSettings& target) const {
  return ApplyAll(target, &Knob::tls);
}
absl::Status Settings::Apply(ClientConfig& target) const {
  return ApplyAll(target, &Knob::client);
}

namespace {

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

// Number writes a bound as people do: 1000000, not 1e+06.
std::string Number(double x) {
  if (x == std::floor(x) && std::abs(x) < 1e15)
    return absl::StrCat(static_cast<int64_t>(x));
  return absl::StrCat(x);
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

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    // Nothing in the worker sets variables, so getenv is safe here.
    // NOLINTNEXTLINE(concurrency-mt-unsafe)
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

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
      return "true or false (or yes, no, 1, 0)";
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
    case KnobType::kSwitch:
      if (!ParseSwitch(text)) {
        return BadValue(source, text,
                        "is not true or false (or yes, no, 1, 0)");
      }
      return absl::OkStatus();
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

}  // namespace cfdb::worker

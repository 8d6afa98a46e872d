#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/drain.h"
#include "daemon/address.h"
#include "daemon/metrics.h"
#include "daemon/scale_in.h"
#include "rpc/unix_socket.h"

namespace cfdb::worker {
namespace {

std::string Fallback(double value) { return absl::StrCat(value); }

}  // namespace

namespace knob {

const Knob kHost{"--host", "CFDB_WORKER_HOST", "127.0.0.1", "HOST",
                 "address to listen on (0.0.0.0 for all IPv4 interfaces)"};
const Knob kPort{
    "--port", "CFDB_WORKER_PORT", "50051", "PORT",
    "port to listen on, 0..65535 (0: pick a free port and log it)"};
const Knob kUds{"--uds", "CFDB_WORKER_UDS", "", "PATH",
                "also listen on this Unix socket file, owner-only and without "
                "TLS (a stale file is replaced, a live worker's refused)"};
const Knob kWoolCompat{
    "--wool-compat",
    "CFDB_WORKER_WOOL_COMPAT",
    "false",
    "",
    "also serve idle and stop as wool.runtime.protobuf.wire.Worker, for the "
    "Python worker library's fleet tooling",
    true};
const Knob kEcsScaleInProtection{
    "--ecs-scale-in-protection",
    "CFDB_WORKER_ECS_SCALE_IN_PROTECTION",
    "false",
    "",
    "protect the ECS task from scale-in while a job is in flight (needs "
    "ECS_AGENT_URI; for tasks of a service with auto scaling)",
    true};
const Knob kEcsProtectionExpiresMinutes{
    "--ecs-protection-expires-minutes",
    "CFDB_WORKER_ECS_PROTECTION_EXPIRES_MINUTES",
    absl::StrCat(kDefaultProtectionExpiresMinutes), "MINUTES",
    "each protection's expiry, renewed at half of it while busy, 1..2880"};
const Knob kMetricsInterval{
    "--metrics-interval-seconds", "CFDB_WORKER_METRICS_INTERVAL_SECONDS",
    Fallback(kDefaultMetricsIntervalSeconds), "SECONDS",
    "with --log-format json, one CloudWatch EMF metrics line this often, "
    "0 or >= 1 (0: none)"};
const Knob kMetricsService{
    "--metrics-service", "CFDB_WORKER_METRICS_SERVICE", "cfdb-worker", "NAME",
    "the metrics' Service dimension (e.g. the stack's name)"};
const Knob kIdleTimeout{
    "--idle-timeout-seconds", "CFDB_WORKER_IDLE_TIMEOUT_SECONDS",
    Fallback(kDefaultIdleTimeoutSeconds), "SECONDS",
    "retire the worker after this long idle, >= 0 (0: never)"};
const Knob kIdlePollInterval{"--idle-poll-interval-seconds",
                             "CFDB_WORKER_IDLE_POLL_INTERVAL_SECONDS",
                             Fallback(kDefaultIdlePollIntervalSeconds),
                             "SECONDS", "time between idle polls, > 0"};
const Knob kIdlePollDeadline{
    "--idle-poll-deadline-seconds", "CFDB_WORKER_IDLE_POLL_DEADLINE_SECONDS",
    Fallback(kDefaultIdlePollDeadlineSeconds), "SECONDS",
    "deadline of one idle poll, > 0 and <= the interval (or the interval if "
    "shorter)"};
const Knob kIdlePollFailureLimit{
    "--idle-poll-failure-limit", "CFDB_WORKER_IDLE_POLL_FAILURE_LIMIT",
    absl::StrCat(kDefaultIdlePollFailureLimit), "COUNT",
    "stop polling after this many failed polls in a row, >= 1"};
const Knob kMaxLifetime{
    "--max-lifetime-seconds", "CFDB_WORKER_MAX_LIFETIME_SECONDS",
    Fallback(kDefaultMaxLifetimeSeconds), "SECONDS",
    "retire the worker this long after start, >= 0 (0: never)"};
const Knob kMaxLifetimeJitter{
    "--max-lifetime-jitter-seconds", "CFDB_WORKER_MAX_LIFETIME_JITTER_SECONDS",
    "", "SECONDS",
    "retire up to this much before the max lifetime, drawn once at start, "
    ">= 0, at most half the lifetime (0: exactly at it; default: a tenth of "
    "it)"};
const Knob kMaxLifetimeGrace{
    "--max-lifetime-grace-seconds", "CFDB_WORKER_MAX_LIFETIME_GRACE_SECONDS",
    Fallback(kDefaultMaxLifetimeGraceSeconds), "SECONDS",
    "drain grace of the idle and max-lifetime exits (< 0: no limit)"};
const Knob kSignalGrace{
    "--signal-grace-seconds", "CFDB_WORKER_SIGNAL_GRACE_SECONDS",
    Fallback(kDefaultSignalGraceSeconds), "SECONDS",
    "drain grace on SIGTERM/SIGINT (0: cancel at once; < 0: no limit)"};
const Knob kMaxConcurrentTasks{
    "--max-concurrent-tasks", "CFDB_WORKER_MAX_CONCURRENT_TASKS", "", "COUNT",
    "most jobs in flight at once, >= 1 (default: number of CPUs)"};
const Knob kTaskKillGrace{
    "--task-kill-grace-seconds", "CFDB_WORKER_TASK_KILL_GRACE_SECONDS", "10",
    "SECONDS", "SIGTERM -> SIGKILL delay when a job is cancelled, >= 0"};
const Knob kJobNice{"--job-nice", "CFDB_WORKER_JOB_NICE",
                    absl::StrCat(WorkerOptions{}.job_nice), "NICE",
                    "added to the nice value of jobs, 0..19, so Idle, Stop and "
                    "health answers get the CPU first"};
const Knob kLogLevel{"--log-level", "CFDB_WORKER_LOG_LEVEL", "info", "LEVEL",
                     "trace, debug, info, warn, error, critical or off"};
const Knob kLogFormat{
    "--log-format", "CFDB_WORKER_LOG_FORMAT", "text", "FORMAT",
    "text, or json: one JSON object per line (for CloudWatch)"};
const Knob kJobUser{
    "--job-user", "CFDB_WORKER_JOB_USER", "", "USER",
    "run jobs as NAME, UID or UID:GID (one uid per job running at once, from "
    "that uid on), without privileges (default: as the worker, with a "
    "warning)"};
const Knob kWorkerUser{
    "--worker-user", "CFDB_WORKER_USER", "", "USER",
    "when started as root, become this user, keeping only what starting jobs "
    "as --job-user needs"};
const Knob kJobNproc{"--job-nproc", "CFDB_WORKER_JOB_NPROC", "1024", "COUNT",
                     "most processes each job's uid may have, 0..1000000 (0: "
                     "the worker's own limit); needs --job-user"};
const Knob kJobContainment{
    "--job-containment", "CFDB_WORKER_JOB_CONTAINMENT", "auto", "MODE",
    "auto, cgroup or subreaper: how a job's processes are made to end with "
    "it (docs/SECURITY.md)"};
const Knob kTlsAdmitControl{
    "--tls-admit-control", "CFDB_WORKER_TLS_ADMIT_CONTROL", "", "NAMES",
    "comma-separated client certificate identities (SAN DNS names or URIs) "
    "that may call everything: Dispatch, Stop, Idle, health"};
const Knob kTlsAdmitObserve{
    "--tls-admit-observe", "CFDB_WORKER_TLS_ADMIT_OBSERVE", "", "NAMES",
    "comma-separated identities that may call Idle and health only (e.g. the "
    "worker's own, for its self-poll and health check)"};
const Knob kAllowInsecure{"--allow-insecure",
                          "CFDB_WORKER_ALLOW_INSECURE",
                          "false",
                          "",
                          "allow plaintext on a non-loopback address",
                          true};

const Knob kTlsCa{
    "--tls-ca", "CFDB_WORKER_TLS_CA", "", "PATH",
    "PEM file of the CA that signs workers and clients (mutual TLS)"};
const Knob kTlsCert{"--tls-cert", "CFDB_WORKER_TLS_CERT", "", "PATH",
                    "PEM certificate chain this side presents"};
const Knob kTlsKey{"--tls-key", "CFDB_WORKER_TLS_KEY", "", "PATH",
                   "PEM private key of --tls-cert"};
const Knob kTlsCaEnv{
    "--tls-ca-env", "CFDB_WORKER_TLS_CA_ENV", "", "VARIABLE",
    "a variable holding the CA PEM, instead of --tls-ca (wiped "
    "from the environment once read)"};
const Knob kTlsCertEnv{"--tls-cert-env", "CFDB_WORKER_TLS_CERT_ENV", "",
                       "VARIABLE",
                       "a variable holding the certificate PEM, instead of "
                       "--tls-cert (wiped once read)"};
const Knob kTlsKeyEnv{"--tls-key-env", "CFDB_WORKER_TLS_KEY_ENV", "",
                      "VARIABLE",
                      "a variable holding the key PEM, instead of --tls-key "
                      "(wiped once read)"};
const Knob kTlsIdentity{
    "--tls-identity", "CFDB_WORKER_TLS_IDENTITY", "", "NAME",
    "SAN expected on the worker's certificate (empty: the dialled host)"};
const Knob kTlsRefreshInterval{"--tls-refresh-interval-seconds",
                               "CFDB_WORKER_TLS_REFRESH_INTERVAL_SECONDS", "60",
                               "SECONDS",
                               "how often certificate files are re-read, >= 1"};
const Knob kTlsCrlDir{
    "--tls-crl-dir", "CFDB_WORKER_TLS_CRL_DIR", "", "PATH",
    "directory of hashed CRL files (openssl rehash) enforced on every "
    "handshake"};

const Knob kAddress{
    "--address", "CFDB_WORKER_ADDRESS", "127.0.0.1:50051", "HOST:PORT",
    "worker address (HOST:PORT, or unix:PATH for a worker's --uds socket)"};
const Knob kAttempts{"--attempts", "CFDB_WORKER_ATTEMPTS", "1", "COUNT",
                     "retry transient errors until this many attempts, with a "
                     "backoff from 0.5 s to 10 s, 1..1000 (1: no retry)"};

}  // namespace knob

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
    return {knob.fallback, absl::StrCat(std::string(knob.flag), " (default)"),
            false};
  }

  // Seconds parses a finite number of seconds; negative only if allowed.
  absl::StatusOr<Duration> Seconds(const Knob& knob,
                                   bool allow_negative) const {
    const Setting s = Get(knob);
    double value = 0;
    if (!absl::SimpleAtod(s.text, &value)) return Bad(s, "is not a number");
    if (!std::isfinite(value)) return Bad(s, "is not a finite number");
    if (value < 0 && !allow_negative) return Bad(s, "is negative");
    return GraceFromSeconds(value);
  }

  absl::StatusOr<bool> Switch(const Knob& knob) const {
    const Setting s = Get(knob);
    bool value = false;
    if (!absl::SimpleAtob(s.text, &value))
      return Bad(s, "is not true or false");
    return value;
  }

  absl::StatusOr<int64_t> Integer(const Knob& knob, int64_t min,
                                  int64_t max) const {
    const Setting s = Get(knob);
    int64_t value = 0;
    if (!absl::SimpleAtoi(s.text, &value))
      return Bad(s, "is not a whole number");
    if (value < min || value > max) {
      return Bad(s, absl::StrCat("is outside ", min, "..", max));
    }
    return value;
  }

  // NonEmpty returns the text of `knob`, refusing an empty one.
  absl::StatusOr<std::string> NonEmpty(const Knob& knob) const {
    const Setting s = Get(knob);
    if (s.text.empty()) return Bad(s, "is empty");
    return s.text;
  }

  static absl::Status Bad(const Setting& s, std::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.source, ": '", s.text, "' ", std::string(problem)));
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
  CFDB_ASSIGN(options.idle_timeout, r.Seconds(knob::kIdleTimeout, false));
  CFDB_ASSIGN(options.idle_poll_interval,
              r.Seconds(knob::kIdlePollInterval, false));
  if (options.idle_poll_interval <= Duration::zero()) {
    return Resolver::Bad(r.Get(knob::kIdlePollInterval),
                         "must be greater than 0");
  }
  CFDB_ASSIGN(options.idle_poll_deadline,
              r.Seconds(knob::kIdlePollDeadline, false));
  const Setting deadline = r.Get(knob::kIdlePollDeadline);
  if (options.idle_poll_deadline <= Duration::zero()) {
    return Resolver::Bad(deadline, "must be greater than 0");
  }
  if (options.idle_poll_deadline > options.idle_poll_interval) {
    if (deadline.explicit_value) {
      return Resolver::Bad(
          deadline, absl::StrCat("is longer than the idle poll interval (",
                                 ToSeconds(options.idle_poll_interval), " s)"));
    }
    options.idle_poll_deadline = options.idle_poll_interval;
  }
  CFDB_ASSIGN(options.idle_poll_failure_limit,
              r.Integer(knob::kIdlePollFailureLimit, 1, 1'000'000));
  CFDB_ASSIGN(options.max_lifetime, r.Seconds(knob::kMaxLifetime, false));
  const Setting jitter = r.Get(knob::kMaxLifetimeJitter);
  if (!jitter.explicit_value) {
    options.max_lifetime_jitter = ToDuration(Seconds(
        ToSeconds(options.max_lifetime) * kDefaultMaxLifetimeJitterFraction));
  } else {
    CFDB_ASSIGN(options.max_lifetime_jitter,
                r.Seconds(knob::kMaxLifetimeJitter, false));
  }
  CFDB_ASSIGN(options.max_lifetime_grace,
              r.Seconds(knob::kMaxLifetimeGrace, true));
  CFDB_ASSIGN(options.signal_grace, r.Seconds(knob::kSignalGrace, true));
  return absl::OkStatus();
}

absl::Status ResolveWorker(const Resolver& r, WorkerOptions& options) {
  if (!r.Get(knob::kMaxConcurrentTasks).explicit_value) {
    options.max_concurrent_tasks =
        std::max(1u, std::thread::hardware_concurrency());
  } else {
    CFDB_ASSIGN(options.max_concurrent_tasks,
                r.Integer(knob::kMaxConcurrentTasks, 1, 100'000));
  }
  CFDB_ASSIGN(options.task_kill_grace, r.Seconds(knob::kTaskKillGrace, false));
  CFDB_ASSIGN(options.job_nice, r.Integer(knob::kJobNice, 0, 19));
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
absl::Status CheckJobUidsSpareTheWorker(const Resolver& r,
                                        const ServeConfig& c) {
  // BecomeWorker drops to --worker-user only when started as root.
  const uint64_t worker_uid =
      c.worker_user && geteuid() == 0 ? c.worker_user->uid : geteuid();
  const uint64_t first = c.exec.user->uid;
  const uint64_t last = first + static_cast<uint64_t>(c.exec.user->uids) - 1;
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
  CFDB_ASSIGN(nproc, r.Integer(knob::kJobNproc, 0, 1'000'000));
  if (c.job_user) {
    c.exec.user =
        JobUser{.uid = c.job_user->uid,
                .gid = c.job_user->gid,
                .uids = static_cast<int>(c.worker.max_concurrent_tasks),
                .name = c.job_user->name};
    c.exec.nproc = static_cast<rlim_t>(nproc);
    // Somewhere every uid of the job user may work.
    c.exec.default_cwd = "/tmp";
    if (absl::Status s = CheckJobUidsSpareTheWorker(r, c); !s.ok()) return s;
  }
  const Setting mode = r.Get(knob::kJobContainment);
  if (mode.text == "auto") {
    c.containment = ContainmentMode::kAuto;
  } else if (mode.text == "cgroup") {
    c.containment = ContainmentMode::kCgroup;
  } else if (mode.text == "subreaper") {
    c.containment = ContainmentMode::kSubreaper;
  } else {
    return Resolver::Bad(mode, "is not auto, cgroup or subreaper");
  }
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

absl::Status ResolveLogging(const Resolver& r, ServeConfig& c) {
  const Setting level = r.Get(knob::kLogLevel);
  static constexpr std::string_view kLevels[] = {
      "trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), level.text) ==
      std::end(kLevels)) {
    return Resolver::Bad(
        level, "is not one of trace, debug, info, warn, error, critical, off");
  }
  c.log_level = level.text;
  const Setting format = r.Get(knob::kLogFormat);
  if (format.text != "text" && format.text != "json") {
    return Resolver::Bad(format, "is not text or json");
  }
  c.log_format = format.text == "json" ? LogFormat::kJson : LogFormat::kText;
  return absl::OkStatus();
}

}  // namespace

std::span<const Knob* const> ServeKnobs() {
  using namespace knob;  // NOLINT: the table below names every knob
  static const Knob* const kAll[] = {&kHost,
                                     &kPort,
                                     &kUds,
                                     &kWoolCompat,
                                     &kEcsScaleInProtection,
                                     &kEcsProtectionExpiresMinutes,
                                     &kMetricsInterval,
                                     &kMetricsService,
                                     &kIdleTimeout,
                                     &kIdlePollInterval,
                                     &kIdlePollDeadline,
                                     &kIdlePollFailureLimit,
                                     &kMaxLifetime,
                                     &kMaxLifetimeJitter,
                                     &kMaxLifetimeGrace,
                                     &kSignalGrace,
                                     &kMaxConcurrentTasks,
                                     &kTaskKillGrace,
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
                                     &kTlsCrlDir};
  return kAll;
}

std::span<const Knob* const> TlsKnobs() { return ServeKnobs().last(9); }

std::span<const Knob* const> ClientKnobs() {
  static const Knob* const kAll[] = {&knob::kAddress, &knob::kAttempts};
  return kAll;
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
  CFDB_ASSIGN(tls.refresh_interval,
              r.Seconds(knob::kTlsRefreshInterval, false));
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
  CFDB_ASSIGN(c.port, r.Integer(knob::kPort, 0, 65535));
  if (const Setting uds = r.Get(knob::kUds); !uds.text.empty()) {
    if (absl::Status s = CheckUnixSocketPath(uds.text); !s.ok()) {
      return Resolver::Bad(uds, std::string(s.message()));
    }
    c.unix_socket = uds.text;
  }
  CFDB_ASSIGN(c.wool_compat, r.Switch(knob::kWoolCompat));
  CFDB_ASSIGN(c.scale_in.enabled, r.Switch(knob::kEcsScaleInProtection));
  int64_t expires = 0;
  CFDB_ASSIGN(expires, r.Integer(knob::kEcsProtectionExpiresMinutes, 1,
                                 kMaxProtectionExpiresMinutes));
  c.scale_in.expires = std::chrono::minutes(expires);
  c.scale_in.agent_uri = env("ECS_AGENT_URI").value_or("");
  CFDB_ASSIGN(c.metrics_interval, r.Seconds(knob::kMetricsInterval, false));
  if (c.metrics_interval > Duration::zero() &&
      c.metrics_interval < std::chrono::seconds(1)) {
    return Resolver::Bad(r.Get(knob::kMetricsInterval),
                         "is under 1 s (0 turns metrics off)");
  }
  CFDB_ASSIGN(c.metrics_service, r.NonEmpty(knob::kMetricsService));
  if (absl::Status s = ResolveRetirement(r, c.retirement); !s.ok()) return s;
  if (absl::Status s = ResolveWorker(r, c.worker); !s.ok()) return s;
  if (absl::Status s = ResolveLogging(r, c); !s.ok()) return s;
  if (absl::Status s = ResolveSandbox(r, c); !s.ok()) return s;
  CFDB_ASSIGN(c.tls, ResolveTlsSettings(flags, env));
  CFDB_ASSIGN(c.credentials, MakeCredentials(c.tls));
  if (absl::Status s = ResolveAdmission(r, c); !s.ok()) return s;
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
  CFDB_ASSIGN(c.attempts, r.Integer(knob::kAttempts, 1, 1000));
  CFDB_ASSIGN(c.credentials, ResolveCredentials(flags, env));
  return c;
}

}  // namespace cfdb::worker

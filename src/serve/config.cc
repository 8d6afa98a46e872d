#include "serve/config.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "rpc/san_match.h"
#include "rpc/tls_files.h"
#include "serve/address.h"
#include "serve/pod_deletion_cost.h"
#include "serve/tls_knobs.h"

namespace cfdb::worker {
namespace {

// Named is the setting a rule names in its refusal: the one given, or, for
// a typed configuration, the knob's flag with `value`.
Setting Named(const Settings* given, std::string_view flag, std::string value) {
  if (given != nullptr) return given->Get(flag);
  return {&KnobNamed(flag), std::move(value), std::string(flag), true};
}

std::string SecondsText(Duration d) { return absl::StrCat(ToSeconds(d)); }

// CheckNumbers refuses what the knobs' ranges refuse, for a typed
// configuration, where nothing checked them (from flags they all hold).
absl::Status CheckNumbers(const ServeConfig& c, const Settings* given) {
  const RetirementOptions& r = c.retirement;
  struct Rule {
    bool holds;
    std::string_view flag;
    std::string value;
    std::string_view problem;
  };
  const Rule rules[] = {
      {!c.host.empty(), "--host", c.host, "is empty"},
      {c.port >= 0 && c.port <= 65535, "--port", absl::StrCat(c.port),
       "is outside 0..65535"},
      {r.idle_poll_interval > Duration::zero(), "--idle-poll-interval-seconds",
       SecondsText(r.idle_poll_interval), "must be greater than 0"},
      {r.idle_poll_deadline > Duration::zero(), "--idle-poll-deadline-seconds",
       SecondsText(r.idle_poll_deadline), "must be greater than 0"},
      {r.listener_check_interval > Duration::zero(),
       "--listener-check-interval-seconds",
       SecondsText(r.listener_check_interval), "must be greater than 0"},
      {r.idle_poll_failure_limit >= 1, "--idle-poll-failure-limit",
       absl::StrCat(r.idle_poll_failure_limit), "is below 1"},
      {c.worker.max_concurrent_tasks >= 1, "--max-concurrent-tasks",
       absl::StrCat(c.worker.max_concurrent_tasks), "is below 1"},
  };
  for (const Rule& rule : rules) {
    if (!rule.holds)
      return Named(given, rule.flag, rule.value).Bad(rule.problem);
  }
  if (r.idle_poll_deadline > r.idle_poll_interval) {
    return Named(given, "--idle-poll-deadline-seconds",
                 SecondsText(r.idle_poll_deadline))
        .Bad(absl::StrCat("is longer than the idle poll interval (",
                          ToSeconds(r.idle_poll_interval), " s)"));
  }
  return absl::OkStatus();
}

// ComputeDefaults sets what is computed unless given: the concurrency (the
// number of CPUs), the lifetime's jitter (a tenth of it), a poll deadline
// no longer than its interval, the ECS agent's endpoint, the pod and its
// API server.
void ComputeDefaults(const Settings& settings, ServeConfig& c) {
  RetirementOptions& r = c.retirement;
  if (!settings.Get("--max-concurrent-tasks").explicit_value) {
    c.worker.max_concurrent_tasks =
        std::max(1u, std::thread::hardware_concurrency());
  }
  if (!settings.Get("--max-lifetime-jitter-seconds").explicit_value) {
    r.max_lifetime_jitter = ToDuration(
        Seconds(ToSeconds(r.max_lifetime) * kDefaultMaxLifetimeJitterFraction));
  }
  if (!settings.Get("--idle-poll-deadline-seconds").explicit_value) {
    r.idle_poll_deadline = std::min(r.idle_poll_deadline, r.idle_poll_interval);
  }
  c.scale_in.agent_uri = settings.env()("ECS_AGENT_URI").value_or("");
  FindPod(settings.env(), c.deletion_cost);
}

// CheckJobUidsSpareTheWorker refuses a job user whose uids (one per job
// running at once) include the uid the worker runs as: such a job could
// read the worker's credentials and signal it.
absl::Status CheckJobUidsSpareTheWorker(const ServeConfig& c,
                                        const JobUser& job,
                                        const Settings* given) {
  // BecomeWorker drops to --worker-user only when started as root.
  const uint64_t worker_uid =
      c.worker_user && geteuid() == 0 ? c.worker_user->uid : geteuid();
  const uint64_t first = job.uid;
  const uint64_t last = first + static_cast<uint64_t>(job.uids) - 1;
  if (worker_uid < first || worker_uid > last) return absl::OkStatus();
  return Named(given, "--job-user", job.name)
      .Bad(absl::StrCat(
          "gives jobs uids ", first, "..", last,
          " (one per concurrent job), which include the worker's own uid ",
          worker_uid,
          ": a job could read its credentials and signal it; give jobs uids "
          "apart from the worker's"));
}

// PrepareExec makes the exec kind's options: jobs as the job user, each of
// whose uids may work in /tmp.
absl::Status PrepareExec(const Settings* given, PreparedServe& p) {
  const ServeConfig& c = p.config;
  if (!c.job_user) return absl::OkStatus();
  const JobUser job{.uid = c.job_user->uid,
                    .gid = c.job_user->gid,
                    .uids = static_cast<int>(c.worker.max_concurrent_tasks),
                    .name = c.job_user->name};
  p.exec.user = job;
  p.exec.nproc = static_cast<rlim_t>(c.job_nproc);
  p.exec.default_cwd = "/tmp";
  return CheckJobUidsSpareTheWorker(c, job, given);
}

// CheckSelfPoll proves, before listening, that the worker's self-poll can
// succeed with its own credentials (CheckServingSet), and keeps what it
// checked for the credential mirror, which checks every new set the same.
absl::Status CheckSelfPoll(const Settings* given, PreparedServe& p) {
  const ServeConfig& c = p.config;
  if (p.credentials.kind != Credentials::Kind::kMutualTls) {
    return absl::OkStatus();
  }
  p.self_poll.host = c.tls.identity.empty()
                         ? HostOf(LoopbackTarget(c.host, c.port))
                         : c.tls.identity;
  p.self_poll.host_source =
      c.tls.identity.empty()
          ? ""
          : Named(given, "--tls-identity", c.tls.identity).source;
  if (!c.admit.empty()) {
    p.self_poll.idle_admitted = c.admit.control;
    for (const auto* list : {&c.admit.observe, &c.admit.admin}) {
      p.self_poll.idle_admitted.insert(p.self_poll.idle_admitted.end(),
                                       list->begin(), list->end());
    }
    const Setting observe = Named(given, "--tls-admit-observe", "");
    p.self_poll.admitted_source =
        observe.explicit_value ? observe.source : "--tls-admit-observe";
  }
  absl::StatusOr<PemSet> pems = ReadPemSet(c.tls);
  if (!pems.ok()) return pems.status();
  return CheckServingSet(c.tls, *pems, p.self_poll);
}

// CheckTransport refuses admission lists without mutual TLS, and
// plaintext where anyone who reaches the address could run programs.
absl::Status CheckTransport(const Settings* given, const PreparedServe& p) {
  const ServeConfig& c = p.config;
  if (!c.admit.empty() && p.credentials.kind != Credentials::Kind::kMutualTls) {
    const auto& [flag, list] =
        !c.admit.control.empty()
            ? std::pair("--tls-admit-control", &c.admit.control)
        : !c.admit.observe.empty()
            ? std::pair("--tls-admit-observe", &c.admit.observe)
            : std::pair("--tls-admit-admin", &c.admit.admin);
    return Named(given, flag, list->front())
        .Bad(
            "needs mutual TLS (--tls-ca, --tls-cert, --tls-key): without "
            "client certificates there is no identity to admit");
  }
  if (c.http_port > 0 && c.http_port == c.port) {
    return Named(given, "--http-port", std::to_string(c.http_port))
        .Bad("is --port's too: the HTTP port needs a port of its own");
  }
  if (p.credentials.kind == Credentials::Kind::kInsecure &&
      !IsLoopbackHost(c.host) && !c.allow_insecure) {
    return Named(given, "--host", c.host)
        .Bad(
            "is not a loopback address (an IP literal of 127.0.0.0/8 or ::1, "
            "or localhost), and without TLS anyone who reaches it could run "
            "programs on this worker and stop it: set --tls-ca, --tls-cert "
            "and --tls-key, or pass --allow-insecure");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedServe> PrepareServe(ServeConfig config,
                                           const Settings* given) {
  PreparedServe p{.config = std::move(config)};
  ServeConfig& c = p.config;
  if (absl::Status s = CheckNumbers(c, given); !s.ok()) return s;
  // Past the idle timeout the worker has retired: no job can come.
  if (c.retirement.idle_timeout > Duration::zero()) {
    c.scale_in.hold = std::min(c.scale_in.hold, c.retirement.idle_timeout);
    c.deletion_cost.hold =
        std::min(c.deletion_cost.hold, c.retirement.idle_timeout);
  }
  if (c.deletion_cost.safe_to_evict && !c.deletion_cost.enabled) {
    return Named(given, "--k8s-safe-to-evict", "true")
        .Bad("needs --k8s-deletion-cost: the annotation goes in its patches");
  }
  if (absl::Status s = CheckPod(c.deletion_cost); !s.ok()) {
    return Named(given, "--k8s-deletion-cost", "true")
        .Bad(std::string(s.message()));
  }
  if (absl::Status s = PrepareExec(given, p); !s.ok()) return s;
  absl::StatusOr<Credentials> credentials = MakeCredentials(c.tls);
  if (!credentials.ok()) return credentials.status();
  p.credentials = *std::move(credentials);
  if (absl::Status s = CheckSelfPoll(given, p); !s.ok()) return s;
  if (absl::Status s = CheckTransport(given, p); !s.ok()) return s;
  return p;
}

absl::StatusOr<ServeConfig> ResolveServeConfig(const KnobValues& flags,
                                               const EnvLookup& env) {
  const Settings settings(flags, env);
  ServeConfig c;
  if (absl::Status s = settings.Apply(c); !s.ok()) return s;
  ComputeDefaults(settings, c);
  absl::StatusOr<TlsSettings> tls = ResolveTlsSettings(settings);
  if (!tls.ok()) return tls.status();
  c.tls = *std::move(tls);
  absl::StatusOr<PreparedServe> prepared =
      PrepareServe(std::move(c), &settings);
  if (!prepared.ok()) return prepared.status();
  return std::move(prepared->config);
}

absl::StatusOr<ClientConfig> ResolveClientConfig(const KnobValues& flags,
                                                 const EnvLookup& env) {
  const Settings settings(flags, env);
  ClientConfig c;
  if (absl::Status s = settings.Apply(c); !s.ok()) return s;
  absl::StatusOr<Credentials> credentials = ResolveCredentials(settings);
  if (!credentials.ok()) return credentials.status();
  c.credentials = *std::move(credentials);
  return c;
}

absl::StatusOr<ServeConfig> ServeConfigFromFlags(const KnobValues& flags,
                                                 const EnvLookup& env) {
  std::vector<std::string> serve_flags;
  for (const Knob* knob : ServeKnobs()) serve_flags.emplace_back(knob->flag);
  for (const auto& [flag, value] : flags) {
    if (std::find(serve_flags.begin(), serve_flags.end(), flag) ==
        serve_flags.end()) {
      const std::optional<std::string> near = ClosestName(flag, serve_flags);
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": not a flag of serve",
          near ? absl::StrCat("; did you mean ", *near, "?") : ""));
    }
  }
  const EnvLookup lookup = env ? env : ProcessEnv();
  absl::StatusOr<ServeConfig> config = ResolveServeConfig(flags, lookup);
  if (!env) WipeVariables(SecretVariables(Settings(flags, lookup)));
  return config;
}

}  // namespace cfdb::worker

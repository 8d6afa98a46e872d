// ServeConfig: everything `cfdb-worker serve` can be told, typed, for
// Serve (serve.h). The binary builds it from its flags and CFDB_WORKER_*
// variables with ServeConfigFromFlags; a program that embeds the worker may
// do the same, or fill one in itself:
//
//   cfdb::worker::ServeConfig config;
//   config.port = 0;  // a free port, logged
//   config.retirement.idle_timeout = std::chrono::minutes(1);
//   config.exec_kind = false;  // only the program's own kinds
//   absl::Status s = cfdb::worker::Serve(config, register_kinds);
//
// Each field's flag and range: docs/CONFIGURATION.md (generated from the
// knob table, src/serve/knobs.cc, whose defaults are these).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/containment.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// RetirementOptions say when a serving worker retires by itself, and how
// it drains (the retirement policy, src/serve/retirement.h).
struct RetirementOptions {
  // Idle at or past this retires the worker. Zero disables idle polling: no
  // connection is ever made.
  Duration idle_timeout = std::chrono::seconds(600);
  // Time between polls (> 0). The next poll comes earlier when the last
  // reading says the timeout will be reached sooner.
  Duration idle_poll_interval = std::chrono::seconds(15);
  // Deadline of each poll (> 0, at most the interval).
  Duration idle_poll_deadline = std::chrono::seconds(5);
  // After this many consecutive failed polls (>= 1) polling slows down to
  // every fourth interval.
  int idle_poll_failure_limit = 20;
  // The worker retires this long after start whatever it is doing, less
  // the jitter. Zero disables.
  Duration max_lifetime = std::chrono::hours(12);
  // Staggered lifetimes: the effective lifetime is max_lifetime minus an
  // amount drawn uniformly from [0, max_lifetime_jitter] once, when the
  // policy starts, and logged, so that a fleet started by one burst does not
  // retire in the same minute. Zero: exactly max_lifetime. More than half
  // the max lifetime is capped at half, with a warning. From flags, unless
  // given: a tenth of the max lifetime.
  Duration max_lifetime_jitter = std::chrono::seconds(4320);
  // Draws the amount from [0, max]; empty: uniform, from absl::BitGen.
  // Tests inject their own.
  std::function<Duration(Duration max)> draw_jitter;
  // Drain grace of the idle and max-lifetime exits (< 0: no limit).
  Duration max_lifetime_grace = std::chrono::hours(6);
  // Time between listener checks (> 0).
  Duration listener_check_interval = std::chrono::seconds(10);
  // Drain grace of SIGTERM or SIGINT (0: cancel at once, as the platform
  // sends SIGKILL soon after SIGTERM; < 0: no limit), counted from the
  // signal's arrival.
  Duration signal_grace = Duration::zero();
};

// From flags, unless --max-lifetime-jitter-seconds is given, the jitter is
// this fraction of the max lifetime.
inline constexpr double kDefaultMaxLifetimeJitterFraction = 0.1;

// ScaleInOptions turn on busy-aware ECS scale-in protection: the task is
// protected while a job is in flight (docs/DEPLOY.md).
struct ScaleInOptions {
  bool enabled = false;
  // Each protection's expiry (1 min .. 48 h), renewed at half of it.
  Duration expires = std::chrono::minutes(120);
  // Protection stays on this long after the docket empties; at most the
  // idle timeout (when there is one) takes effect.
  Duration hold = std::chrono::seconds(60);
  // The ECS agent's endpoint ($ECS_AGENT_URI); empty: not on ECS, and the
  // protection is off (with a warning).
  std::string agent_uri;
};

// The folder Kubernetes mounts a pod's service account in.
inline constexpr char kServiceAccountDir[] =
    "/var/run/secrets/kubernetes.io/serviceaccount";

// PodDeletionCostOptions turn on busy-aware Kubernetes scale-in: while a job
// is in flight (and for `hold` after), the worker's own pod carries
// `controller.kubernetes.io/pod-deletion-cost: busy_cost` (a ReplicaSet
// scaling down deletes the cheapest pods first) and
// `karpenter.sh/do-not-disrupt: "true"`; when idle, a cost of 0 and no
// do-not-disrupt (docs/KUBERNETES.md).
struct PodDeletionCostOptions {
  bool enabled = false;
  // Also `cluster-autoscaler.kubernetes.io/safe-to-evict`: "false" while
  // busy (the cluster autoscaler does not drain the node), "true" when idle
  // (it may, even with the pod's emptyDir volumes).
  bool safe_to_evict = false;
  // The deletion cost while busy (0 .. 2^31-1, Kubernetes' int32 range).
  int busy_cost = 1000000;
  // The annotations stay busy this long after the docket empties; at most
  // the idle timeout (when there is one) takes effect.
  Duration hold = std::chrono::seconds(60);
  // The service account's folder: its `token` (re-read for every call, as
  // projected tokens rotate), `ca.crt` and `namespace`.
  std::string service_account_dir = kServiceAccountDir;
  // Found at start from the environment: the API server
  // (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT), the pod's
  // name ($POD_NAME) and namespace ($POD_NAMESPACE, else the service
  // account's `namespace` file). Empty when not found; enabled without
  // them, the worker refuses to start.
  std::string api_server;
  std::string pod_name;
  std::string pod_namespace;
};

// LogFormat is how the log is written: text for people, or one JSON object
// per line (for CloudWatch, and needed by the EMF metrics).
enum class LogFormat { kText, kJson };

// User is a user named by NAME, UID or UID:GID (NAME:GID too).
struct User {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;  // as given
  std::string home;  // from the user database; "" if it has no entry
};

// ServeConfig is the whole configuration of Serve. A plain value.
struct ServeConfig {
  // Where to listen; plaintext on a host that is not loopback needs
  // allow_insecure. Port 0 picks a free port (logged).
  std::string host = "127.0.0.1";
  int port = 50051;
  // Also listen on this Unix socket file (ServerOptions::unix_socket).
  std::string unix_socket;
  // Also serve wool.runtime.protobuf.wire.Worker's idle and stop.
  bool wool_compat = false;
  // The plain-HTTP port of /metrics, /healthz and /readyz (docs/METRICS.md):
  // -1 none, 0 a free port (logged); on http_host, empty: `host`.
  int http_port = -1;
  std::string http_host;
  ScaleInOptions scale_in;
  PodDeletionCostOptions deletion_cost;
  // One EMF metrics line this often, with JSON logs (zero: none), with
  // this Service dimension.
  Duration metrics_interval = std::chrono::seconds(60);
  std::string metrics_service = "cfdb-worker";
  RetirementOptions retirement;
  // From flags, unless given, max_concurrent_tasks is the number of CPUs.
  WorkerOptions worker;
  std::string log_level = "info";  // trace, debug, info, warn, error, ...
  LogFormat log_format = LogFormat::kText;
  // TLS: none of the three files is plaintext; all three mutual TLS.
  TlsSettings tls;
  // Plaintext on a non-loopback address was explicitly allowed.
  bool allow_insecure = false;
  // Who may call what (mutual TLS only); empty: every admitted certificate
  // may call everything.
  AdmissionLists admit;
  // Who jobs run as (none: as the worker, with a warning), and who the
  // worker becomes when started as root (none: it stays uid 0, keeping only
  // what jobs need).
  std::optional<User> job_user;
  std::optional<User> worker_user;
  // Most processes each job's uid may have (0: the worker's own limit);
  // with job_user only.
  int job_nproc = 1024;
  ContainmentMode containment = ContainmentMode::kAuto;
  // Register the built-in exec kind (kExecKind: clients run programs). A
  // worker that should run only its own kinds turns it off.
  bool exec_kind = true;
};

// KnobValues hold knob values keyed by flag, as on serve's command line,
// e.g. {"--port", "0"}; a switch takes "true" or "false".
using KnobValues = std::map<std::string, std::string, std::less<>>;

// EnvLookup returns the value of an environment variable, or nullopt.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// ServeConfigFromFlags builds a ServeConfig as `cfdb-worker serve` does
// from its command line: each knob from `flags`, else its CFDB_WORKER_*
// variable (set to something), else its default; then checked as Serve
// checks every configuration. `env` empty: this process's environment,
// whose PEM variables (--tls-*-env) are then wiped once read, as the
// binary does. INVALID_ARGUMENT naming the flag or variable and showing the
// value: a key that is not a knob of serve (with "did you mean"), a bad
// value (not a number, out of range, an unknown choice or user, ...), or a
// refused combination (the rules Serve lists, serve.h). Reads the TLS files and
// the user database.
absl::StatusOr<ServeConfig> ServeConfigFromFlags(const KnobValues& flags,
                                                 const EnvLookup& env = {});

}  // namespace cfdb::worker

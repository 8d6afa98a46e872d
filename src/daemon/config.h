// Configuration of the cfdb-worker binary: every knob is a flag and a
// CFDB_WORKER_* environment variable; a flag beats its variable, which beats
// the default. A variable set to the empty string counts as unset, for every
// knob (a flag given an empty value is checked like any other value). A bad
// value is refused naming the flag or variable it came from and showing it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/containment.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"
#include "daemon/identity.h"
#include "daemon/logging.h"
#include "daemon/retirement.h"

namespace cfdb::worker {

// Knob describes one setting: its flag, its variable, its default (as text),
// a type word for --help, and what it means.
struct Knob {
  std::string_view flag;      // e.g. "--idle-timeout-seconds"
  std::string_view variable;  // e.g. "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"
  std::string fallback;       // default, as text ("" = computed or unset)
  std::string_view type;      // e.g. "SECONDS", "PORT", "PATH"
  std::string_view help;
  bool is_switch = false;  // a flag without a value ("true" when given)
};

// The knobs, one object each, so that a knob that does not exist cannot be
// named.
namespace knob {
extern const Knob kHost, kPort, kUds, kWoolCompat, kEcsScaleInProtection,
    kEcsProtectionExpiresMinutes, kMetricsInterval, kMetricsService,
    kIdleTimeout, kIdlePollInterval, kIdlePollDeadline, kIdlePollFailureLimit,
    kMaxLifetime, kMaxLifetimeJitter, kMaxLifetimeGrace, kSignalGrace,
    kMaxConcurrentTasks, kTaskKillGrace, kJobNice, kLogLevel, kLogFormat,
    kAllowInsecure, kJobUser, kWorkerUser, kJobNproc, kJobContainment,
    kTlsAdmitControl, kTlsAdmitObserve;
extern const Knob kTlsCa, kTlsCert, kTlsKey, kTlsCaEnv, kTlsCertEnv, kTlsKeyEnv,
    kTlsIdentity, kTlsRefreshInterval, kTlsCrlDir;
extern const Knob kAddress, kAttempts;
}  // namespace knob

// ServeKnobs returns every knob of `serve`, in the README's order (the TLS
// knobs last); TlsKnobs the TLS knobs, which clients share; ClientKnobs the
// knobs of every client command but TLS.
std::span<const Knob* const> ServeKnobs();
std::span<const Knob* const> TlsKnobs();
std::span<const Knob* const> ClientKnobs();

// FlagValues holds the flags given on a command line, keyed by flag.
using FlagValues = std::map<std::string, std::string, std::less<>>;

// EnvLookup returns the value of an environment variable, or nullopt.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// ProcessEnv looks variables up in this process's environment.
EnvLookup ProcessEnv();

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 50051;         // 0: pick a free port
  std::string unix_socket;  // also listen here (ServerOptions::unix_socket)
  // Also serve wool.runtime.protobuf.wire.Worker's idle and stop.
  bool wool_compat = false;
  // Busy-aware ECS scale-in protection (daemon/scale_in.h).
  struct ScaleIn {
    bool enabled = false;
    Duration expires = std::chrono::minutes(120);
    std::string agent_uri;  // $ECS_AGENT_URI; empty: not on ECS
  } scale_in;
  // EMF metrics (daemon/metrics.h), with JSON logs; zero: none.
  Duration metrics_interval = std::chrono::seconds(60);
  std::string metrics_service = "cfdb-worker";
  RetirementOptions retirement;
  WorkerOptions worker;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kText;
  Credentials credentials;
  // Plaintext on a non-loopback address was explicitly allowed.
  bool allow_insecure = false;
  // Who may call what (mutual TLS only); empty: every admitted certificate
  // may call everything.
  AdmissionLists admit;
  // Who jobs run as (none: as the worker), and who the worker becomes when
  // started as root (none: it stays uid 0, keeping only what jobs need).
  std::optional<User> job_user;
  std::optional<User> worker_user;
  // How the exec kind runs programs (user, nproc, default cwd); its
  // containment is made at startup from `containment`.
  ExecOptions exec;
  ContainmentMode containment = ContainmentMode::kAuto;
  // The TLS settings `credentials` came from: PEMs given in variables are
  // written to files once the worker runs as its own user (CredentialMirror).
  TlsSettings tls;
};

// ResolveServeConfig builds the configuration from flag values (keyed by
// flag, e.g. "--port"; only flags given on the command line) and the
// environment. INVALID_ARGUMENT on the first bad value, with a message that
// names the flag or variable and says what is wrong: not a number, NaN or
// infinite, negative, zero poll interval or deadline, poll deadline longer
// than the interval, failure limit or concurrency below 1, port outside
// 0..65535, unknown log level, empty host, bad TLS settings, plaintext on a
// host that is not a loopback IP literal or a "localhost" resolving to
// loopback only (without --allow-insecure), an unknown user, an unknown
// containment, admission lists without mutual TLS or with an identity that
// is not printable ASCII, a --uds path that is not absolute, too long or
// in no directory. Reads the TLS files and the user database, and
// resolves "localhost"; touches no global state.
absl::StatusOr<ServeConfig> ResolveServeConfig(const FlagValues& flags,
                                               const EnvLookup& env);

// ClientConfig is what every client command takes: the worker's address,
// how many attempts a transient failure gets, and credentials.
struct ClientConfig {
  std::string address;
  int attempts = 1;
  Credentials credentials;
};

// ResolveClientConfig builds a client command's configuration, with the
// same rules and messages as ResolveServeConfig (an empty address, attempts
// outside 1..1000, bad TLS settings).
absl::StatusOr<ClientConfig> ResolveClientConfig(const FlagValues& flags,
                                                 const EnvLookup& env);

// ResolveCredentials builds credentials from the TLS knobs (see
// MakeCredentials for the checks). A PEM may come from a file (--tls-ca)
// or from the variable another knob names (--tls-ca-env), not both;
// INVALID_ARGUMENT naming the knob otherwise, or when the variable is unset.
absl::StatusOr<Credentials> ResolveCredentials(const FlagValues& flags,
                                               const EnvLookup& env);
absl::StatusOr<TlsSettings> ResolveTlsSettings(const FlagValues& flags,
                                               const EnvLookup& env);

// SecretVariables returns the variables the TLS knobs name as holding PEMs
// (--tls-*-env), for WipeVariables once they are read.
std::vector<std::string> SecretVariables(const FlagValues& flags,
                                         const EnvLookup& env);

// WipeVariables overwrites the values of `names` in this process's
// environment with NULs where they lie (so /proc/<pid>/environ no longer
// shows them) and unsets them. Not thread-safe: call before threads start.
void WipeVariables(const std::vector<std::string>& names);

}  // namespace cfdb::worker

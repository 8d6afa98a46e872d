// Configuration of the cfdb-worker binary: every knob is a flag and a
// CFDB_WORKER_* environment variable; a flag beats its variable, which beats
// the default. A variable set to the empty string counts as unset, for every
// knob (a flag given an empty value is checked like any other value). A bad
// value is refused naming the flag or variable it came from and showing it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
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

// KnobScope says which commands take a knob.
enum class KnobScope {
  kServe,   // `serve` only
  kTls,     // `serve` and every client command
  kClient,  // every client command (`reap` all but --address)
};

// KnobType says how a knob's text is read and checked.
enum class KnobType {
  kText,     // any text (the code may refuse some: an empty host)
  kSwitch,   // a flag without a value ("true" when given), or true/false
  kChoice,   // one of `choices`
  kInteger,  // a whole number within `range`
  kSeconds,  // a finite number of seconds within `range`
};

// KnobRange bounds a number: min..max, min itself excluded if `above_min`;
// `or_zero`: 0 is accepted too, below min (0 turns the thing off).
struct KnobRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool above_min = false;
  bool or_zero = false;
};

// KnobDefault is the default the code uses, typed as the knob is; monostate
// when there is none, or when it is computed at startup (`default_note` then
// says how).
using KnobDefault =
    std::variant<std::monostate, bool, int64_t, double, std::string_view>;

// Knob describes one setting, once: its flag and variable, which commands
// take it, its type, default and range, and what it means. Validation
// (CheckKnobValue), --help (KnobHelp) and the README's table (KnobTable)
// come from it; tests/daemon/cloudformation_test.cc checks the deploy
// template against it.
struct Knob {
  std::string_view flag;      // e.g. "--idle-timeout-seconds"
  std::string_view variable;  // e.g. "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"
  KnobScope scope = KnobScope::kServe;
  KnobType type = KnobType::kText;
  KnobDefault fallback;
  std::string_view metavar;  // for --help: "SECONDS", "PORT", "PATH"
  std::string_view help;     // what it means; range and default are added
  KnobRange range = {};      // kInteger, kSeconds
  std::span<const std::string_view> choices = {};  // kChoice
  std::string_view default_note = {};  // a computed default, in words
};

// The knobs named outside config.cc, which defines every knob (one object
// each, so that a knob that does not exist cannot be named) and lists them
// in AllKnobs.
namespace knob {
extern const Knob kMaxLifetimeJitter;  // its default is computed
extern const Knob kAddress;            // reap takes every client knob but it
}  // namespace knob

// AllKnobs returns the table: every knob once, in the order --help and the
// README list them. KnobsOf returns those of one scope, in that order.
std::span<const Knob* const> AllKnobs();
std::span<const Knob* const> KnobsOf(KnobScope scope);

// ServeKnobs returns the knobs of `serve`: its own, then the TLS ones.
std::span<const Knob* const> ServeKnobs();

// KnobDefaultText is a knob's default as text, as an unset knob reads ("":
// none or computed); KnobRangeText its range in words ("0..65535", ">= 0",
// "auto, cgroup or subreaper"; "" for text); KnobHelp the line --help shows.
std::string KnobDefaultText(const Knob& knob);
std::string KnobRangeText(const Knob& knob);
std::string KnobHelp(const Knob& knob);

// CheckKnobValue checks `text` against the knob's type and range, as
// ResolveServeConfig does; INVALID_ARGUMENT "<source>: '<text>' <what is
// wrong>" naming `source` (the flag or variable it came from).
absl::Status CheckKnobValue(const Knob& knob, std::string_view source,
                            std::string_view text);

// KnobTable is the Markdown table of the knobs of `scope` that README.md
// holds ("| flag | variable | default | range | meaning |"), one row a knob;
// tests/daemon/config_test.cc checks the README against it.
std::string KnobTable(KnobScope scope);

// FlagValues holds the flags given on a command line, keyed by flag.
using FlagValues = std::map<std::string, std::string, std::less<>>;

// EnvLookup returns the value of an environment variable, or nullopt.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// ProcessEnv looks variables up in this process's environment.
EnvLookup ProcessEnv();

// SecondsRange is what a number of seconds given to a flag may be.
enum class SecondsRange {
  kPositive,     // > 0: a deadline
  kNonNegative,  // >= 0: a threshold, a time limit (0 often: none)
  kAny,          // any finite number: a grace (< 0: no limit)
};

// ParseSecondsFlag and ParseIntegerFlag check a value given to `flag` (or a
// variable) by the rules of every knob and word a refusal the same way:
// INVALID_ARGUMENT "<flag>: '<text>' <what is wrong, or the range>". The
// client commands' own flags, which have no variable, go through them too.
absl::StatusOr<double> ParseSecondsFlag(std::string_view flag,
                                        std::string_view text,
                                        SecondsRange range);
absl::StatusOr<int64_t> ParseIntegerFlag(std::string_view flag,
                                         std::string_view text, int64_t min,
                                         int64_t max);

// ClosestName returns the one of `names` closest to `given` by edit
// distance, if it is close enough to be what was meant (at most 2 edits,
// fewer for a short name), for "did you mean --grace-seconds?".
std::optional<std::string> ClosestName(std::string_view given,
                                       std::span<const std::string> names);

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
    // Protection stays on this long after the docket empties; at most the
    // idle timeout (when there is one).
    Duration hold = std::chrono::seconds(60);
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
  // served from memory (CredentialMirror).
  TlsSettings tls;
  // What the worker's own certificate must allow for its self-poll, checked
  // at start and on every rotation (CheckServingSet).
  SelfPollCheck self_poll;
};

// ResolveServeConfig builds the configuration from flag values (keyed by
// flag, e.g. "--port"; only flags given on the command line) and the
// environment. INVALID_ARGUMENT on the first bad value, with a message that
// names the flag or variable and says what is wrong: not a number, NaN or
// infinite, negative, zero poll interval, deadline or listener check
// interval, poll deadline longer
// than the interval, failure limit or concurrency below 1, port outside
// 0..65535, unknown log level, empty host, bad TLS settings, plaintext on a
// host that is not a loopback IP literal or a "localhost" resolving to
// loopback only (without --allow-insecure), an unknown user, an unknown
// containment, admission lists without mutual TLS or with an identity that
// is not printable ASCII or can never match (AdmissionEntryProblem), a
// worker certificate its own self-poll could not succeed with (its SAN,
// its TLS roles, its admission: CheckServingSet), a --uds path that is not
// absolute, too long or in no directory. Reads the TLS files and the user
// database, and resolves "localhost"; touches no global state.
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

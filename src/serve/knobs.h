// The knob table: every setting of `cfdb-worker serve` and of the client
// commands is a flag and a CFDB_WORKER_* environment variable, described
// once, in one row of AllKnobs (knobs.cc): its flag and variable, type,
// default and range, what it means, and the setter that writes it into the
// configuration. A flag beats its variable, which beats the default; a
// variable set to the empty string counts as unset, for every knob (a flag
// given an empty value is checked like any other value). A bad value is
// refused naming the flag or variable it came from and showing it.
// Validation (CheckKnobValue), --help (KnobHelp), docs/CONFIGURATION.md and
// docs/TLS.md's table (KnobTable) come from it; tests check the docs and
// the deploy template against it. The rules across knobs: config_rules.cc;
// the TLS files: tls_knobs.cc.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/serve_config.h"

namespace cfdb::worker {

// KnobScope says which commands take a knob: it follows from the knob's
// setter.
enum class KnobScope {
  kServe,   // `serve` only
  kTls,     // `serve` and every client command
  kClient,  // every client command (`reap` all but --address)
};

// KnobType says how a knob's text is read and checked.
enum class KnobType {
  kText,     // any text (its setter may refuse some: an empty host)
  kSwitch,   // a flag without a value ("true" when given), or true/false
  kChoice,   // one of `choices`
  kInteger,  // a whole number within `range`
  kSeconds,  // a finite number of seconds within `range`
};

// The words a switch takes, whatever their case: the one rule for every
// boolean knob, flag or variable.
inline constexpr std::string_view kSwitchTrue[] = {"true", "1", "yes"};
inline constexpr std::string_view kSwitchFalse[] = {"false", "0", "no"};

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

// ClientConfig is what every client command takes: the worker's address,
// how many attempts a transient failure gets, and credentials.
struct ClientConfig {
  std::string address;
  int attempts = 1;
  Credentials credentials;
};

struct Setting;

// Knob describes one setting, once. Exactly one of its setters is set, for
// its scope: `serve` writes ServeConfig, `tls` the TLS settings serve and
// the clients share, `client` a client command's configuration. A setter
// is called with the knob's value already checked against its type and
// range (unset knobs without a default are not set at all), and may refuse
// it (Setting::Bad).
struct Knob {
  std::string_view flag;      // e.g. "--idle-timeout-seconds"
  std::string_view variable;  // e.g. "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"
  KnobType type = KnobType::kText;
  KnobDefault fallback;
  std::string_view metavar;  // for --help: "SECONDS", "PORT", "PATH"
  std::string_view help;     // what it means; range and default are added
  KnobRange range = {};      // kInteger, kSeconds
  std::span<const std::string_view> choices = {};  // kChoice
  std::string_view default_note = {};  // a computed default, in words
  absl::Status (*serve)(const Setting&, ServeConfig&) = nullptr;
  absl::Status (*tls)(const Setting&, TlsSettings&) = nullptr;
  absl::Status (*client)(const Setting&, ClientConfig&) = nullptr;

  KnobScope scope() const {
    return serve != nullptr ? KnobScope::kServe
           : tls != nullptr ? KnobScope::kTls
                            : KnobScope::kClient;
  }
};

// Setting is one knob's value as resolved: its text and where it came from.
struct Setting {
  const Knob* knob = nullptr;
  std::string text;
  std::string source;  // the flag or variable, for messages
  bool explicit_value = false;
  // Where variables are looked up (a setter reading the one another names).
  const EnvLookup* env = nullptr;

  // Read parses the text (checked already) into `out`, as the knob's type
  // reads it: seconds, a whole number, a switch, the text itself.
  absl::Status Read(Duration& out) const;
  absl::Status Read(int& out) const;
  absl::Status Read(std::size_t& out) const;
  absl::Status Read(bool& out) const;
  absl::Status Read(std::string& out) const;
  // NonEmpty reads the text, refusing an empty one.
  absl::Status NonEmpty(std::string& out) const;
  // Bad is the refusal of this value: INVALID_ARGUMENT "<source>:
  // '<text>' <problem>".
  absl::Status Bad(std::string_view problem) const;
};

// AllKnobs returns the table: every knob once, in the order --help and the
// docs list them. KnobsOf returns those of one scope, in that order.
std::span<const Knob> AllKnobs();
std::vector<const Knob*> KnobsOf(KnobScope scope);
// ServeKnobs returns the knobs of `serve`: its own, then the TLS ones.
std::vector<const Knob*> ServeKnobs();

// KnobNamed returns the knob of `flag`; a flag that names no knob is a bug
// (it aborts, naming it).
const Knob& KnobNamed(std::string_view flag);

// Settings resolves knobs from flags (keyed by flag, only those given on
// the command line) and the environment.
class Settings {
 public:
  Settings(const KnobValues& flags, const EnvLookup& env)
      : flags_(flags), env_(env) {}
  // Get returns the setting of `knob`: the flag given, else its variable
  // when set to something, else the default.
  Setting Get(const Knob& knob) const;
  Setting Get(std::string_view flag) const { return Get(KnobNamed(flag)); }
  // Apply checks each knob of `scope` (CheckKnobValue) and calls its setter
  // on `target`; the first refusal.
  absl::Status Apply(ServeConfig& target) const;
  absl::Status Apply(TlsSettings& target) const;
  absl::Status Apply(ClientConfig& target) const;
  const EnvLookup& env() const { return env_; }

 private:
  template <typename Target, typename Setter>
  absl::Status ApplyAll(Target& target, Setter Knob::*setter) const;
  const KnobValues& flags_;
  const EnvLookup& env_;
};

// KnobDefaultText is a knob's default as text, as an unset knob reads ("":
// none or computed); KnobRangeText its range in words ("0..65535", ">= 0",
// "auto, cgroup or subreaper"; "" for text); KnobHelp the line --help shows.
std::string KnobDefaultText(const Knob& knob);
std::string KnobRangeText(const Knob& knob);
std::string KnobHelp(const Knob& knob);

// CheckKnobValue checks `text` against the knob's type and range, as
// ServeConfigFromFlags does; INVALID_ARGUMENT "<source>: '<text>' <what is
// wrong>" naming `source` (the flag or variable it came from).
absl::Status CheckKnobValue(const Knob& knob, std::string_view source,
                            std::string_view text);

// KnobTable is the Markdown table of the knobs of `scope` that the docs
// hold ("| flag | variable | default | range | meaning |"), one row a knob.
std::string KnobTable(KnobScope scope);

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
// ParseSwitch reads a switch's text by the one rule (kSwitchTrue,
// kSwitchFalse, any case); nullopt for anything else.
std::optional<bool> ParseSwitch(std::string_view text);

// BadValue is the one wording of a refused value: INVALID_ARGUMENT
// "<flag or variable>: '<value>' <what is wrong>".
absl::Status BadValue(std::string_view source, std::string_view text,
                      std::string_view problem);

// ClosestName returns the one of `names` closest to `given` by edit
// distance, if it is close enough to be what was meant (at most 2 edits,
// fewer for a short name), for "did you mean --grace-seconds?".
std::optional<std::string> ClosestName(std::string_view given,
                                       std::span<const std::string> names);

}  // namespace cfdb::worker

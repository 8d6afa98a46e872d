// Configuration of `cfdb-worker serve`: every knob is a flag and a
// CFDB_WORKER_* environment variable; a flag beats its variable; a bad value
// is refused naming the flag or variable it came from.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cfdb/worker/address.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/log.h"
#include "cfdb/worker/reaper.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// Knob describes one setting: its flag, its variable, its default (as text)
// and what it means. The table in config.cc is the one list of knobs.
struct Knob {
  std::string_view flag;      // e.g. "--idle-timeout-seconds"
  std::string_view variable;  // e.g. "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"
  std::string fallback;       // default, as text ("" = computed or unset)
  std::string_view help;
  bool is_switch = false;     // a flag without a value ("true" when given)
};

// ServeKnobs returns every knob of `serve`, in the README's order.
std::span<const Knob> ServeKnobs();

// TlsKnobs returns the TLS knobs, which clients share with `serve`.
std::span<const Knob> TlsKnobs();

// FlagValues holds the flags given on a command line, keyed by flag.
using FlagValues = std::map<std::string, std::string, std::less<>>;

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 50051;  // 0: pick a free port
  ReaperOptions reaper;
  WorkerOptions worker;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kText;
  Credentials credentials;
  // Plaintext on a non-loopback address was explicitly allowed.
  bool allow_insecure = false;
};

// EnvLookup returns the value of an environment variable, or nullopt.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// ProcessEnv looks variables up in this process's environment.
EnvLookup ProcessEnv();

// ResolveServeConfig builds the configuration from flag values (keyed by
// flag, e.g. "--port"; only flags given on the command line) and the
// environment. INVALID_ARGUMENT on the first bad value, with a message that
// names the flag or variable and says what is wrong: not a number, NaN or
// infinite, negative, zero poll interval or deadline, poll deadline longer
// than the interval, failure limit or concurrency below 1, port outside
// 0..65535, unknown log level, empty host, bad TLS settings, plaintext on a
// non-loopback host without --allow-insecure. Reads the TLS files; touches
// no global state.
absl::StatusOr<ServeConfig> ResolveServeConfig(const FlagValues& flags,
                                              const EnvLookup& env);

// ResolveCredentials builds credentials from the TLS knobs (see
// MakeCredentials for the checks), for `serve` and the client commands.
absl::StatusOr<Credentials> ResolveCredentials(const FlagValues& flags,
                                               const EnvLookup& env);

}  // namespace cfdb::worker

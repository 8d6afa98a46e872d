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
#include "cfdb/worker/reaper.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// Knob describes one setting: its flag, its variable, its default (as text)
// and what it means. The table in config.cc is the one list of knobs.
struct Knob {
  std::string_view flag;      // e.g. "--idle-timeout-seconds"
  std::string_view variable;  // e.g. "CFDB_WORKER_IDLE_TIMEOUT_SECONDS"
  std::string fallback;       // default, as text ("" = computed)
  std::string_view help;
};

// ServeKnobs returns every knob of `serve`, in the README's order.
std::span<const Knob> ServeKnobs();

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 50051;  // 0: pick a free port
  ReaperOptions reaper;
  WorkerOptions worker;
  std::string log_level = "info";
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
// 0..65535, unknown log level, empty host. Pure: touches no global state.
absl::StatusOr<ServeConfig> ResolveServeConfig(
    const std::map<std::string, std::string, std::less<>>& flags,
    const EnvLookup& env);

}  // namespace cfdb::worker

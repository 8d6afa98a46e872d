// The subcommands of the cfdb-worker binary, behind main.cc's flag parsing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cfdb/worker/clock.h"
#include "cfdb/worker/credentials.h"
#include "daemon/config.h"

namespace cfdb::worker::cli {

// Exit codes shared by every subcommand (client errors: errors.h).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeFailure = 1;  // e.g. the port is in use
inline constexpr int kExitUsage = 2;           // bad flag or variable

// RunServe serves a worker and runs its retirement policy until it exits.
int RunServe(const ServeConfig& config);

struct ClientOptions {
  std::string address;
  Duration timeout{};
  // Calls failing with a transient error are retried, with a backoff, until
  // this many attempts were made (>= 1).
  int attempts = 1;
  Credentials credentials;
};

int RunIdle(const ClientOptions& options);
// RunHealth exits 0 only when the worker answers SERVING for `service`
// (empty: the whole server), 1 when it answers anything else; RPC failures
// exit as in errors.h (an unknown service is NOT_FOUND: 76).
int RunHealth(const ClientOptions& options, const std::string& service);
int RunStop(const ClientOptions& options, double grace_seconds);

struct DispatchOptions {
  std::string job_id;  // empty: generated
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  double time_limit_seconds = 0;
  bool read_stdin = true;
};

int RunDispatch(const ClientOptions& options, const DispatchOptions& dispatch);

}  // namespace cfdb::worker::cli

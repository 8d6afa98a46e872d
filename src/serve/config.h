// The configuration of `serve` as a whole: built from the knob table
// (knobs.h) with the defaults that are computed, and checked across knobs
// before anything starts; and a client command's. The rules across knobs
// live here, each once, for a configuration from flags and a typed one
// alike.
#pragma once

#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/serve_config.h"
#include "serve/knobs.h"

namespace cfdb::worker {

// PreparedServe is a checked configuration and what Serve derives from it.
struct PreparedServe {
  ServeConfig config;
  Credentials credentials;  // from config.tls
  ExecOptions exec;         // the exec kind's: job user, nproc, cwd
  // What the worker's own certificate must allow for its self-poll, checked
  // at start and on every rotation (CheckServingSet).
  SelfPollCheck self_poll;
};

// ResolveServeConfig builds the configuration from flag values (keyed by
// flag, e.g. "--port"; only flags given on the command line) and the
// environment: each knob's setter, then the defaults that are computed (the
// number of CPUs, a tenth of the max lifetime, a poll deadline no longer
// than its interval, $ECS_AGENT_URI), then PrepareServe's checks.
// INVALID_ARGUMENT on the first bad value (CheckKnobValue, a setter's
// refusal, or a rule below), naming the flag or variable it came from.
absl::StatusOr<ServeConfig> ResolveServeConfig(const KnobValues& flags,
                                               const EnvLookup& env);

// PrepareServe checks `config` across knobs, by the rules Serve lists
// (serve.h, INVALID_ARGUMENT), and derives what Serve needs. `given` is the
// settings it came from, for messages (null: a typed configuration, whose
// messages name the flags). Reads the TLS files and resolves "localhost".
absl::StatusOr<PreparedServe> PrepareServe(ServeConfig config,
                                           const Settings* given = nullptr);

// ResolveClientConfig builds a client command's configuration, with the
// same rules and messages as ResolveServeConfig (an empty address, attempts
// outside 1..1000, bad TLS settings).
absl::StatusOr<ClientConfig> ResolveClientConfig(const KnobValues& flags,
                                                 const EnvLookup& env);

}  // namespace cfdb::worker

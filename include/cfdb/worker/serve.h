// Serve: the whole `cfdb-worker serve` in one call, for a program that
// embeds the worker and registers job kinds of its own. It does what the
// binary does, in the same order, and returns when the worker retires:
//
// - logging set up (spdlog's default logger on stderr, text or JSON, with
//   gRPC's own lines routed into it: --log-level, --log-format);
// - the process made ready while it has one thread: SIGPIPE ignored,
//   glibc's heap thresholds fixed (one arena, trimmed every 2 s), abseil's
//   lock-order tracking off (but in an ASan build), the descriptor limit
//   raised, the job guard forked (it kills the jobs'
//   process groups if the process dies), the jobs' containment started,
//   privileges dropped (--worker-user, --job-user), SIGTERM and SIGINT
//   blocked;
// - the worker, with the built-in exec kind and the kinds `register_kinds`
//   adds; the server (TCP, and the Unix socket with --uds; mutual TLS from
//   a checked private copy of the files);
// - SIGTERM and SIGINT as stop requests with the signal grace (a second one
//   cancels what is left); the Stop RPC;
// - the retirement policy on the calling thread: the loopback self-poll of
//   Idle (idle timeout), the max lifetime, the listener check;
// - EMF metrics and busy-aware ECS scale-in protection when configured;
// - the drain, its log line, and the server's shutdown.
//
//   int main() {
//     cfdb::worker::ServeConfig config;  // serve_config.h
//     config.retirement.idle_timeout = std::chrono::minutes(1);
//     absl::Status s = cfdb::worker::Serve(
//         config, [](cfdb::worker::Worker& worker) {
//           return worker.RegisterKind("echo", {.run = ...});
//         });
//     if (absl::IsInvalidArgument(s)) std::cerr << s.message() << "\n";
//     return cfdb::worker::ServeExitCode(s);
//   }
//
// A whole program: examples/reverse_worker.cc (its configuration from
// serve's flags, ServeConfigFromFlags); the knobs: docs/CONFIGURATION.md.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cfdb/worker/serve_config.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// The exit codes every command of the binary shares (docs/CLI.md): the
// client commands' others come from their error kinds (errors.h,
// ExitCodeFor).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeFailure = 1;  // e.g. the port is in use
inline constexpr int kExitUsage = 2;           // a bad flag or variable

// The end of a stop, after the drain and the cancelled jobs' kill grace:
// calls still open (a Stop reply on its way out) get kCallsGrace before the
// server cancels them, and gRPC's shutdown kShutdownStall more before the
// process exits 1 anyway. docs/DESIGN.md's "stop sequence" table and every
// terminationGracePeriodSeconds and StopTimeout sum come from these.
inline constexpr std::chrono::seconds kCallsGrace{5};
inline constexpr std::chrono::seconds kShutdownStall{10};

// Serve serves a worker until it retires (see the top of this file) and
// returns why. Blocks the calling thread throughout.
//
// Call it once per process, from the main thread, before any other thread
// is started (no gRPC channel or server made before it, no thread pool):
// it forks the job guard, drops privileges and blocks SIGTERM and SIGINT
// while it has the only thread, so that every later thread inherits the
// blocked signals and the guard is forked from a process without locks
// held. A thread started earlier could take a SIGTERM and end the process
// without a drain; Serve logs a warning when it finds more than one thread.
// It replaces spdlog's default logger, sets SIGPIPE to be ignored and
// fixes glibc's heap thresholds (mallopt: one arena, M_MMAP_THRESHOLD and
// M_TRIM_THRESHOLD; an arena made by a thread started before Serve stays),
// turns off abseil's deadlock detection (absl::SetMutexDeadlockDetectionMode:
// a lock-order cycle aborts a process with Debian's abseil), and leaves them
// so. It returns with an alarm armed
// (alarm(2), SIGALRM): gRPC's shutdown has been seen to stall, so the process
// ends (exit 1, saying so) if it has not exited kCallsGrace + kShutdownStall
// after the drain ended; a
// program that goes on after Serve cancels it with alarm(0).
//
// `register_kinds` (may be empty) is called once with the worker before it
// is served, after the exec kind was registered: it registers the
// program's kinds (Worker::RegisterKind) and may set Worker::OnStopping or
// OnDrained callbacks. The worker lives until Serve returns; handlers must
// not use it after that.
//
// Returns:
// - OK: the worker retired cleanly (idle, max lifetime, a signal, a Stop
//   RPC) and every job ended;
// - INVALID_ARGUMENT: the configuration was refused, with a message naming
//   the flag of the field at fault: an empty host, a port outside
//   0..65535, a poll interval, poll deadline or listener check interval
//   that is not positive, a poll deadline longer than the interval, a
//   failure limit or concurrency below 1, bad TLS settings (MakeCredentials
//   in credentials.h), job uids that include the worker's own, admission
//   lists without mutual TLS, a worker certificate its own self-poll could
//   not succeed with (its SAN, its TLS roles, its admission), or plaintext
//   on a host that is not a loopback IP literal or a "localhost" resolving
//   to loopback only (without allow_insecure). Nothing was done, and
//   nothing logged (logging is not set up yet): the caller should say it;
// - PERMISSION_DENIED: the process could not take the identity the
//   configuration asks for (--worker-user, --job-user: e.g. jobs of another
//   user without CAP_SETUID and CAP_SETGID);
// - UNAVAILABLE: the worker stopped because it could no longer accept
//   connections (its listener was lost), after its drain: the platform
//   should replace it;
// - FAILED_PRECONDITION: a part could not start: the server (the address
//   in use, the Unix socket taken), the containment, the TLS files' copy,
//   the signal thread;
// - whatever `register_kinds` returned, when not OK (nothing was served).
// Every failure but INVALID_ARGUMENT is also logged.
absl::Status Serve(const ServeConfig& config,
                   const std::function<absl::Status(Worker&)>& register_kinds);

// ServeExitCode maps what Serve returned to the exit code of `cfdb-worker
// serve`: 0 for OK, 2 for a refused configuration or identity
// (INVALID_ARGUMENT, PERMISSION_DENIED), 1 for anything else.
int ServeExitCode(const absl::Status& status);

}  // namespace cfdb::worker

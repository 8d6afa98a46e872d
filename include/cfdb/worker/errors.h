// Classification of failed calls to a worker: the one place that decides
// whether a failure means "capability missing", "try again" or "broken".
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace cfdb::worker {

// Rpc names the worker's RPCs, because a code's meaning depends on the call.
enum class Rpc { kIdle, kStop, kDispatch, kHealth };

// ErrorKind is what a caller should make of a failed call.
enum class ErrorKind {
  // The worker predates the Idle RPC (UNIMPLEMENTED on Idle). A capability
  // signal, deliberately not an RPC fault: never evict a worker for it.
  kIdleUnavailable,
  // UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED: retrying may work.
  kTransient,
  // A transient error with TLS evidence: UNAUTHENTICATED, or UNAVAILABLE
  // whose message names TLS, SSL, a certificate, the handshake or a failed
  // verification. Named
  // apart so a fleet-wide credential mistake is diagnosable. Note: when the
  // worker rejects the client's certificate, the client usually sees only a
  // plain transport failure (the worker closes the connection), which
  // classifies as kTransient.
  kHandshakeError,
  // Anything else: retrying the same call will not help.
  kRpcError,
};

// ClassifyError maps a non-OK status from `rpc` to its kind.
ErrorKind ClassifyError(Rpc rpc, const absl::Status& status);

// IsTransient returns true for kTransient and kHandshakeError.
bool IsTransient(ErrorKind kind);

// ErrorKindName returns "idle unavailable", "transient error", "handshake
// error" or "rpc error".
std::string_view ErrorKindName(ErrorKind kind);

// ExitCodeFor returns the documented exit code of a client command that
// failed with `kind`: 69 idle unavailable, 75 transient (handshake errors
// included), 76 rpc error (sysexits.h: EX_UNAVAILABLE, EX_TEMPFAIL,
// EX_PROTOCOL).
int ExitCodeFor(ErrorKind kind);

}  // namespace cfdb::worker

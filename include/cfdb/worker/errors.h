// Classification of failed calls to a worker: the one place that decides
// whether a failure means "capability missing", "not started here: try
// again", "broken: do not retry", or, once a job was accepted, what the
// caller may assume about the job.
//
//   absl::StatusOr<JobOutcome> outcome = connection->Dispatch(request, {});
//   if (!outcome.ok()) {
//     switch (ClassifyError(Rpc::kDispatch, outcome.status())) {
//       case ErrorKind::kTransient: ...  // the job did not start: retry
//       case ErrorKind::kOutcomeUnknown: ...  // it started: never resend
//       ...
//     }
//   }
#pragma once

#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "cfdb/worker/rpcs.h"

namespace cfdb::worker {

// ErrorKind is what a caller should make of a failed call. It follows the
// cause (the code, whether the worker had accepted the job, and the
// message's evidence), not the gRPC code alone.
enum class ErrorKind {
  // The worker predates the Idle RPC (UNIMPLEMENTED on Idle). A capability
  // signal, deliberately not an RPC fault: never evict a worker for it.
  kIdleUnavailable,
  // Nothing was started: the worker is stopping or gone (UNAVAILABLE, a
  // call CANCELLED by its shutdown, a connection closed or reset), the
  // caller's deadline passed before an answer (Idle, Stop, health), or the
  // docket is full (RESOURCE_EXHAUSTED without a size limit in the
  // message). Retrying, here later or on another worker, may work. A
  // Dispatch lost on the way may have been accepted all the same
  // (MayHaveBeenAccepted): the clients' dispatch attach to find out, and
  // say kTransient only when no job of its id is there (or no worker
  // answers).
  kTransient,
  // A transient error with TLS evidence: UNAUTHENTICATED, or UNAVAILABLE
  // whose message names TLS, SSL, a certificate, the handshake or a failed
  // verification. Named apart so a fleet-wide credential mistake is
  // diagnosable. Note: when the worker rejects the client's certificate,
  // the client usually sees only a plain transport failure (the worker
  // closes the connection), which classifies as kTransient.
  kHandshakeError,
  // Deterministic: the same call fails again anywhere (INVALID_ARGUMENT,
  // UNIMPLEMENTED on any RPC but Idle, a message over a size limit whatever
  // its code, ...). Do not retry.
  kRpcError,
  // PERMISSION_DENIED: the worker's admission lists do not let this
  // client's certificate identity call this method (server.h,
  // AdmissionLists). Nothing ran. Do not retry with the same certificate.
  kPermissionDenied,
  // Dispatch only, after the worker accepted the job: the stream broke
  // (connection lost, or cut off as the worker shut down) before the job's
  // terminal event. The job started; whether it finished is unknown. Do
  // not resend it blindly: it may have run.
  kOutcomeUnknown,
  // Dispatch only, after the worker accepted the job: the caller's own
  // deadline passed. The worker cancels the job as the call ends.
  kAcceptedDeadlineExceeded,
  // Dispatch only: the caller's deadline passed before any answer. The
  // worker may have admitted the job with its `accepted` still on the way,
  // so it may have started (and the worker cancels it as the call ends).
  // Do not resend it blindly.
  kMaybeStarted,
  // Dispatch: a job of that id runs or its result is retained
  // (ALREADY_EXISTS). Nothing new ran: attach to it instead.
  kAlreadyExists,
  // Attach, Cancel: no job of that id runs or is retained (NOT_FOUND): it
  // never ran there, or its result expired.
  kNotFound,
  // Stop with a condition (if_idle_for): the worker was busy, or not idle
  // long enough, or holds unread results (FAILED_PRECONDITION). It keeps
  // serving; nothing was stopped.
  kStillBusy,
  // Dispatch, Attach (follows_job), ABORTED: another call took the job
  // over (Attach with take_over); it runs on under that call. Nothing was
  // lost and nothing should be resent: this call is done with the job.
  kTakenOver,
};

// ClassifyError maps a non-OK status from `rpc` to its kind: by its code
// and message, and for the codes whose meaning depends on the call, by the
// RPC's row (rpcs.h: follows_job, may_start_job, finds_job, conditional,
// capability). A status from WorkerConnection::Dispatch says by itself
// whether the job had been accepted (see MarkAccepted).
ErrorKind ClassifyError(Rpc rpc, const absl::Status& status);

// MarkAccepted returns `status` marked as failing after the worker accepted
// the job (a status payload), which ClassifyError reads; Accepted tells.
absl::Status MarkAccepted(absl::Status status);
bool Accepted(const absl::Status& status);

// IsTransient returns true for kTransient and kHandshakeError: the kinds
// where the call did not start anything and may be retried.
bool IsTransient(ErrorKind kind);

// LostOnTheWay says whether a failed call (UNAVAILABLE, CANCELLED,
// UNKNOWN or INTERNAL) has gRPC's message for a transport that broke under
// it ("Socket closed", "Stream removed", ...):
// not "failed to connect", nor "GOAWAY received", whose streams the worker
// never processed. The worker's own answers ("worker is stopping", a full
// docket) are not.
bool LostOnTheWay(const absl::Status& status);

// MayHaveBeenAccepted says whether a Dispatch (or DispatchStream) that
// failed before its Accepted came may have been accepted all the same: a
// transient failure lost on the way (LostOnTheWay), possibly with the
// Accepted on its way back. Attaching to the job's id finds out: NOT_FOUND
// means no job of that id is there (it never ran, or, with no result kept,
// --job-result-ttl-seconds 0, it has ended; or the worker restarted).
// Both clients' dispatch attach to see, again while that attach is itself
// lost on the way.
bool MayHaveBeenAccepted(Rpc rpc, const absl::Status& status);

// Each kind's name, exit code and meaning come from one table (errors.cc);
// tests/data/error_cases.json repeats it for the Python client, and tests on
// both sides compare. Thread-safe: constant data.
//
// ErrorKindName returns "idle unavailable", "transient error", "handshake
// error", "rpc error", "permission denied", "accepted, outcome unknown",
// "accepted, deadline exceeded", "no answer before the deadline", "already
// exists", "not found", "still busy" or "taken over".
std::string_view ErrorKindName(ErrorKind kind);

// ExitCodeFor returns the documented exit code of a client command that
// failed with `kind`: 69 idle unavailable, 75 transient (handshake errors
// included), 76 rpc error (sysexits.h: EX_UNAVAILABLE, EX_TEMPFAIL,
// EX_PROTOCOL); 74 accepted, outcome unknown (EX_IOERR: the stream broke);
// 73 accepted, deadline exceeded; 74 also for no answer before the
// deadline (the job may have started); 77 permission denied (EX_NOPERM);
// 65 still busy, 66 not found, 67 already exists, 68 taken over (codes of
// our own).
int ExitCodeFor(ErrorKind kind);

// ErrorKindMeaning returns what `kind` promises about the job, or what to do,
// where that is not plain from its name ("the worker keeps serving"), or ""
// where it is.
std::string_view ErrorKindMeaning(ErrorKind kind);

// ErrorKindSummary returns what `kind` tells a caller, in a line, for the
// docs' table of exit codes (docs/CLI.md, generated).
std::string_view ErrorKindSummary(ErrorKind kind);

// AllErrorKinds returns every kind, once each, in the enum's order.
std::span<const ErrorKind> AllErrorKinds();

}  // namespace cfdb::worker

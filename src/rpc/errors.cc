#include "cfdb/worker/errors.h"

#include <array>
#include <initializer_list>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"

namespace cfdb::worker {

namespace {

constexpr char kAcceptedPayload[] = "type.cfdb.dev/cfdb.worker.accepted";

// The Has*Evidence word lists below are repeated by the Python client
// (cfdb_worker/errors.py), and its test_errors checks the copies.
bool MentionsAny(const absl::Status& status,
                 std::initializer_list<const char*> words) {
  const std::string message = absl::AsciiStrToLower(status.message());
  for (const char* word : words) {
    if (absl::StrContains(message, word)) return true;
  }
  return false;
}

// gRPC words it as e.g. "Ssl handshake failed" or "Custom verification
// check failed with error: UNAUTHENTICATED: Hostname Verification ...".
bool HasTlsEvidence(const absl::Status& status) {
  return MentionsAny(status, {"tls", "ssl", "certificate", "handshake",
                              "verification", "unauthenticated"});
}

// A size limit was hit ("Sent message larger than max (N vs. M)",
// "Received message larger than max", "received initial metadata size
// exceeds limit"): the same message fails the same way everywhere.
bool HasSizeLimitEvidence(const absl::Status& status) {
  return MentionsAny(
      status, {"larger than max", "exceeds limit", "more than the limit"});
}

// The transport broke under the call; gRPC reports that as UNKNOWN or
// INTERNAL at times ("Stream removed", "Socket closed", "Broken pipe"), and
// a connection whose pings went unanswered as "keepalive watchdog timeout".
bool HasTransportEvidence(const absl::Status& status) {
  return MentionsAny(
      status,
      {"stream removed", "socket closed", "connection", "broken pipe", "goaway",
       "transport", "end of file", "cancelling all calls", "keepalive"});
}

ErrorKind AfterAccepted(const absl::Status& status) {
  return status.code() == absl::StatusCode::kDeadlineExceeded
             ? ErrorKind::kAcceptedDeadlineExceeded
             : ErrorKind::kOutcomeUnknown;
}

}  // namespace

absl::Status MarkAccepted(absl::Status status) {
  if (!status.ok()) status.SetPayload(kAcceptedPayload, absl::Cord("1"));
  return status;
}

bool Accepted(const absl::Status& status) {
  return status.GetPayload(kAcceptedPayload).has_value();
}

ErrorKind ClassifyError(Rpc rpc, const absl::Status& status) {
  const RpcInfo& info = InfoOf(rpc);
  if (info.follows_job && Accepted(status)) {
    return status.code() == absl::StatusCode::kAborted ? ErrorKind::kTakenOver
                                                       : AfterAccepted(status);
  }
  using C = absl::StatusCode;
  const C code = status.code();
  if (code == C::kUnauthenticated ||
      (code == C::kUnavailable && HasTlsEvidence(status))) {
    return ErrorKind::kHandshakeError;
  }
  if (HasSizeLimitEvidence(status)) return ErrorKind::kRpcError;
  switch (code) {
    case C::kUnimplemented:
      return info.capability ? ErrorKind::kIdleUnavailable
                             : ErrorKind::kRpcError;
    case C::kDeadlineExceeded:
      // No answer in time: a Dispatch may have been admitted with its
      // Accepted still on the way.
      return info.may_start_job ? ErrorKind::kMaybeStarted
                                : ErrorKind::kTransient;
    case C::kUnavailable:
    // Our clients never cancel a call of their own accord: a CANCELLED call
    // was cut off by the worker (its shutdown cancels what is still open).
    case C::kCancelled:
    case C::kResourceExhausted:  // the docket is full (size limits above)
      return ErrorKind::kTransient;
    case C::kPermissionDenied:
      return ErrorKind::kPermissionDenied;
    case C::kAlreadyExists:
      return ErrorKind::kAlreadyExists;
    case C::kNotFound:
      // Health answers NOT_FOUND for a service it does not know.
      return info.finds_job ? ErrorKind::kNotFound : ErrorKind::kRpcError;
    case C::kFailedPrecondition:
      return info.conditional ? ErrorKind::kStillBusy : ErrorKind::kRpcError;
    case C::kAborted:
      return info.follows_job ? ErrorKind::kTakenOver : ErrorKind::kRpcError;
    case C::kUnknown:
    case C::kInternal:
      return HasTransportEvidence(status) ? ErrorKind::kTransient
                                          : ErrorKind::kRpcError;
    default:
      return ErrorKind::kRpcError;
  }
}

bool IsTransient(ErrorKind kind) {
  return kind == ErrorKind::kTransient || kind == ErrorKind::kHandshakeError;
}

bool LostOnTheWay(const absl::Status& status) {
  // Not gRPC's words for a call the worker never saw: one that never
  // connected, or one a GOAWAY refused (streams past its last stream id
  // were not processed: HTTP/2, RFC 9113 section 6.8).
  using C = absl::StatusCode;
  const C code = status.code();
  return (code == C::kUnavailable || code == C::kCancelled ||
          code == C::kUnknown || code == C::kInternal) &&
         HasTransportEvidence(status) &&
         !MentionsAny(status, {"failed to connect", "goaway"});
}

bool MayHaveBeenAccepted(Rpc rpc, const absl::Status& status) {
  return InfoOf(rpc).may_start_job && !Accepted(status) &&
         ClassifyError(rpc, status) == ErrorKind::kTransient &&
         LostOnTheWay(status);
}

namespace {

// KindRow is one kind as every client says it: its name, its command's exit
// code and what it promises beyond its name. The one place for all three;
// tests/data/error_cases.json's "kinds" repeats them for the Python client,
// and tests on both sides compare.
struct KindRow {
  ErrorKind kind;
  std::string_view name;
  int exit_code;
  std::string_view meaning;
  std::string_view summary;  // for docs/CLI.md's table
};

constexpr KindRow kKinds[] = {
    {ErrorKind::kIdleUnavailable, "idle unavailable", 69, "",
     "the worker predates the Idle RPC (`idle`): a capability, not a fault"},
    {ErrorKind::kTransient, "transient error", 75, "",
     "nothing was started: the worker is stopping or gone, its shutdown cut "
     "the call off, the connection failed, the docket is full; for `idle`, "
     "`health`, `stop` also a deadline; a plaintext call to a worker that "
     "speaks TLS, which the message says. Retrying, here or elsewhere, may "
     "work (`dispatch` attaches to make sure when its call was lost on the "
     "way)"},
    {ErrorKind::kHandshakeError, "handshake error", 75, "",
     "transient, with TLS evidence: a credential mistake to diagnose"},
    {ErrorKind::kRpcError, "rpc error", 76, "",
     "deterministic (an invalid request, a message over a size limit, "
     "unimplemented): do not retry"},
    {ErrorKind::kPermissionDenied, "permission denied", 77, "",
     "the worker's admission lists do not let this certificate's identity "
     "call this RPC (docs/TLS.md); nothing ran"},
    {ErrorKind::kOutcomeUnknown, "accepted, outcome unknown", 74,
     "the job was accepted and started; whether it finished is unknown, so "
     "do not resend it blindly (attach to it, if the worker is there)",
     "`dispatch`, `attach`: the job may have run, its outcome is unknown: "
     "the stream broke and attaching again failed for the job's detach "
     "grace, or the worker's shutdown cut it off; do not resend it "
     "blindly"},
    {ErrorKind::kAcceptedDeadlineExceeded, "accepted, deadline exceeded", 73,
     "the job was accepted and started; dispatch cancels it, after attach it "
     "runs on",
     "`dispatch`, `attach`: the job was accepted and started, then "
     "`--timeout-seconds` passed; `dispatch` cancels it, `attach` leaves it "
     "running"},
    {ErrorKind::kMaybeStarted, "no answer before the deadline", 74,
     "the worker may have started the job before the deadline: do not "
     "resend it blindly",
     "`dispatch`: `--timeout-seconds` passed before any answer; the job may "
     "have started"},
    {ErrorKind::kAlreadyExists, "already exists", 67,
     "attach to it (attach JOB_ID, or dispatch --attach-if-exists) rather "
     "than run it again",
     "`dispatch --job-id` of a job the worker runs or holds the result of; "
     "nothing new ran"},
    {ErrorKind::kNotFound, "not found", 66,
     "it never ran on this worker, or its result expired",
     "`attach`, `cancel`: no job of that id runs on the worker or has a "
     "result retained"},
    {ErrorKind::kStillBusy, "still busy", 65, "the worker keeps serving",
     "`stop --if-idle-for-seconds` found the worker busy, not idle that "
     "long, or holding unread results of detached jobs"},
    {ErrorKind::kTakenOver, "taken over", 68,
     "another call took the job over (attach --take-over); it runs on under "
     "that call",
     "`dispatch`, `attach`: another call took the job over with `attach "
     "--take-over`; the job runs on under it, nothing was lost"},
};

constexpr const KindRow& kRpcErrorRow = kKinds[3];
static_assert(kRpcErrorRow.kind == ErrorKind::kRpcError);

const KindRow& RowOf(ErrorKind kind) {
  for (const KindRow& row : kKinds) {
    if (row.kind == kind) return row;
  }
  return kRpcErrorRow;  // not reached: every kind has a row
}

}  // namespace

std::string_view ErrorKindName(ErrorKind kind) { return RowOf(kind).name; }

int ExitCodeFor(ErrorKind kind) { return RowOf(kind).exit_code; }

std::string_view ErrorKindMeaning(ErrorKind kind) {
  return RowOf(kind).meaning;
}

std::string_view ErrorKindSummary(ErrorKind kind) {
  return RowOf(kind).summary;
}

std::span<const ErrorKind> AllErrorKinds() {
  static constexpr auto kAll = [] {
    std::array<ErrorKind, std::size(kKinds)> all{};
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = kKinds[i].kind;
    return all;
  }();
  return kAll;
}

}  // namespace cfdb::worker

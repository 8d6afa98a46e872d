#include "cfdb/worker/errors.h"

#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"

namespace cfdb::worker {

namespace {

constexpr char kAcceptedPayload[] = "type.cfdb.dev/cfdb.worker.accepted";

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
// INTERNAL at times ("Stream removed", "Socket closed", "Broken pipe").
bool HasTransportEvidence(const absl::Status& status) {
  return MentionsAny(
      status, {"stream removed", "socket closed", "connection", "broken pipe",
               "goaway", "transport", "end of file", "cancelling all calls"});
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
  if ((rpc == Rpc::kDispatch || rpc == Rpc::kAttach) && Accepted(status)) {
    return AfterAccepted(status);
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
      return rpc == Rpc::kIdle ? ErrorKind::kIdleUnavailable
                               : ErrorKind::kRpcError;
    case C::kDeadlineExceeded:
      // No answer in time: a Dispatch may have been admitted with its
      // Accepted still on the way.
      return rpc == Rpc::kDispatch ? ErrorKind::kMaybeStarted
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
      return rpc == Rpc::kAttach || rpc == Rpc::kCancel ? ErrorKind::kNotFound
                                                        : ErrorKind::kRpcError;
    case C::kFailedPrecondition:
      return rpc == Rpc::kStop ? ErrorKind::kStillBusy : ErrorKind::kRpcError;
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

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable:
      return "idle unavailable";
    case ErrorKind::kTransient:
      return "transient error";
    case ErrorKind::kHandshakeError:
      return "handshake error";
    case ErrorKind::kRpcError:
      return "rpc error";
    case ErrorKind::kPermissionDenied:
      return "permission denied";
    case ErrorKind::kOutcomeUnknown:
      return "accepted, outcome unknown";
    case ErrorKind::kAcceptedDeadlineExceeded:
      return "accepted, deadline exceeded";
    case ErrorKind::kMaybeStarted:
      return "no answer before the deadline";
    case ErrorKind::kAlreadyExists:
      return "already exists";
    case ErrorKind::kNotFound:
      return "not found";
    case ErrorKind::kStillBusy:
      return "still busy";
  }
  return "rpc error";
}

int ExitCodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable:
      return 69;
    case ErrorKind::kTransient:
    case ErrorKind::kHandshakeError:
      return 75;
    case ErrorKind::kRpcError:
      return 76;
    case ErrorKind::kPermissionDenied:
      return 77;
    case ErrorKind::kOutcomeUnknown:
    case ErrorKind::kMaybeStarted:
      return 74;
    case ErrorKind::kAcceptedDeadlineExceeded:
      return 73;
    case ErrorKind::kStillBusy:
      return 65;
    case ErrorKind::kNotFound:
      return 66;
    case ErrorKind::kAlreadyExists:
      return 67;
  }
  return 76;
}

}  // namespace cfdb::worker

#include "cfdb/worker/errors.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace cfdb::worker {

namespace {

bool HasTlsEvidence(const absl::Status& status) {
  const std::string message = absl::AsciiStrToLower(status.message());
  // gRPC words it as e.g. "Ssl handshake failed" or "Custom verification
  // check failed with error: UNAUTHENTICATED: Hostname Verification ...".
  for (const char* word : {"tls", "ssl", "certificate", "handshake",
                           "verification", "unauthenticated"}) {
    if (absl::StrContains(message, word)) return true;
  }
  return false;
}

}  // namespace

ErrorKind ClassifyError(Rpc rpc, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnauthenticated ||
      (status.code() == absl::StatusCode::kUnavailable &&
       HasTlsEvidence(status))) {
    return ErrorKind::kHandshakeError;
  }
  switch (status.code()) {
    case absl::StatusCode::kUnimplemented:
      return rpc == Rpc::kIdle ? ErrorKind::kIdleUnavailable
                               : ErrorKind::kRpcError;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return ErrorKind::kTransient;
    default:
      return ErrorKind::kRpcError;
  }
}

bool IsTransient(ErrorKind kind) {
  return kind == ErrorKind::kTransient || kind == ErrorKind::kHandshakeError;
}

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable: return "idle unavailable";
    case ErrorKind::kTransient: return "transient error";
    case ErrorKind::kHandshakeError: return "handshake error";
    case ErrorKind::kRpcError: return "rpc error";
  }
  return "rpc error";
}

int ExitCodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable: return 69;
    case ErrorKind::kTransient:
    case ErrorKind::kHandshakeError: return 75;
    case ErrorKind::kRpcError: return 76;
  }
  return 76;
}

}  // namespace cfdb::worker

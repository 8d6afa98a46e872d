#include "cfdb/worker/errors.h"

namespace cfdb::worker {

ErrorKind ClassifyError(Rpc rpc, const absl::Status& status) {
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

std::string_view ErrorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable: return "idle unavailable";
    case ErrorKind::kTransient: return "transient error";
    case ErrorKind::kRpcError: return "rpc error";
  }
  return "rpc error";
}

int ExitCodeFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIdleUnavailable: return 69;
    case ErrorKind::kTransient: return 75;
    case ErrorKind::kRpcError: return 76;
  }
  return 76;
}

}  // namespace cfdb::worker

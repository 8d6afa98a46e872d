#include "cfdb/worker/job.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace cfdb::worker {

JobOutcome JobOutcome::Exited(int code) {
  JobOutcome outcome;
  outcome.kind = Kind::kExited;
  outcome.code = code;
  return outcome;
}

JobOutcome JobOutcome::Signaled(int signal) {
  JobOutcome outcome;
  outcome.kind = Kind::kSignaled;
  outcome.signal = signal;
  return outcome;
}

JobOutcome JobOutcome::Failed(Failure failure, std::string message) {
  JobOutcome outcome;
  outcome.kind = Kind::kFailed;
  outcome.failure = failure;
  outcome.message = std::move(message);
  return outcome;
}

int JobOutcome::ShellStatus() const {
  switch (kind) {
    case Kind::kExited:
      return code;
    case Kind::kSignaled:
      return 128 + signal;
    case Kind::kFailed:
      break;
  }
  switch (failure) {
    case Failure::kStartFailed:
      return 127;
    case Failure::kTimeLimitExceeded:
      return 124;
    case Failure::kCancelled:
      return 125;
    case Failure::kNone:
    case Failure::kHandlerError:
      return 1;
  }
  return 1;
}

std::string JobOutcome::ToString() const {
  switch (kind) {
    case Kind::kExited:
      return absl::StrCat("exited with code ", code);
    case Kind::kSignaled:
      return absl::StrCat("killed by signal ", signal, " (",
                          sigdescr_np(signal) != nullptr ? sigdescr_np(signal)
                                                         : "unknown signal",
                          ")");
    case Kind::kFailed:
      break;
  }
  return absl::StrCat("failed: ", std::string(FailureName(failure)), ": ",
                      message);
}

std::string_view FailureName(JobOutcome::Failure failure) {
  using F = JobOutcome::Failure;
  switch (failure) {
    case F::kNone:
      return "NONE";
    case F::kStartFailed:
      return "START_FAILED";
    case F::kCancelled:
      return "CANCELLED";
    case F::kTimeLimitExceeded:
      return "TIME_LIMIT_EXCEEDED";
    case F::kHandlerError:
      return "HANDLER_ERROR";
  }
  return "UNKNOWN";
}

}  // namespace cfdb::worker

// The exec kind's request: finding it in a JobRequest and checking it.
#include <cstddef>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/exec.h"
#include "core/text.h"

namespace cfdb::worker {
namespace {

// Roughly Linux's limit on argv + environment of one exec.
constexpr std::size_t kMaxExecArgBytes = 1 << 20;
// Linux's PATH_MAX: a longer program or working directory cannot be used.
constexpr std::size_t kMaxPathBytes = 4096;

bool HasNul(std::string_view s) { return s.find('\0') != s.npos; }

}  // namespace

const ExecSpec* FindExec(const JobRequest& request) {
  return std::any_cast<ExecSpec>(&request.spec);
}

ExecSpec& MutableExec(JobRequest& request) {
  if (std::any_cast<ExecSpec>(&request.spec) == nullptr)
    request.spec = ExecSpec{};
  return *std::any_cast<ExecSpec>(&request.spec);
}

absl::Status ValidateExec(const JobRequest& request) {
  const ExecSpec* exec = FindExec(request);
  if (exec == nullptr) {
    return absl::InvalidArgumentError("exec: an exec job needs an ExecSpec");
  }
  if (exec->argv.empty() || exec->argv[0].empty()) {
    return absl::InvalidArgumentError("exec.argv: must name a program");
  }
  if (exec->argv[0].size() >= kMaxPathBytes ||
      exec->cwd.size() >= kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        exec->argv[0].size() >= kMaxPathBytes ? "exec.argv[0]" : "exec.cwd",
        ": longer than a path may be (", kMaxPathBytes - 1, " bytes)"));
  }
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < exec->argv.size(); ++i) {
    if (HasNul(exec->argv[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("exec.argv[", i, "]: contains a NUL byte"));
    }
    bytes += exec->argv[i].size() + 1;
  }
  for (const auto& [name, value] : exec->env) {
    if (name.empty() || name.find('=') != name.npos || HasNul(name) ||
        HasNul(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "exec.env: bad variable name or value for '", EscapedForLog(name),
          "' (names are non-empty without '='; no NUL bytes)"));
    }
    bytes += name.size() + value.size() + 2;
  }
  // The working directory counts too: a client cannot send a 20 MB one.
  bytes += exec->cwd.size();
  if (bytes > kMaxExecArgBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exec.argv, exec.env and exec.cwd: ", bytes,
        " bytes in all, more than the limit of ", kMaxExecArgBytes));
  }
  if (HasNul(exec->cwd)) {
    return absl::InvalidArgumentError("exec.cwd: contains a NUL byte");
  }
  if (exec->time_limit < Duration::zero()) {
    return absl::InvalidArgumentError("exec.time_limit_seconds: negative");
  }
  return absl::OkStatus();
}

JobKind ExecKind(ExecOptions options) {
  return JobKind{.validate = ValidateExec,
                 .run = [options = std::move(options)](JobContext& ctx) {
                   return RunExec(ctx, options);
                 }};
}

}  // namespace cfdb::worker

// dispatch_request_fuzz: arbitrary bytes parsed as a
// cfdb.worker.v1.DispatchRequest, then wire::FromProto and Worker::Validate
// with "exec" registered, as the server does before it runs a job. Each step
// accepts or refuses with INVALID_ARGUMENT, never crashes; an accepted
// request is one RunExec can start: a named program, no NUL byte where a C
// string goes, well-formed environment entries, a sane time limit, and
// argv + env within the exec limit. Nothing is run.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cfdb/worker/exec.h"
#include "cfdb/worker/worker.h"
#include "google/protobuf/stubs/logging.h"
#include "rpc/wire.h"

namespace {

using cfdb::worker::Duration;
using cfdb::worker::JobRequest;

[[noreturn]] void Fail(const char* what, std::string_view detail = "") {
  std::fprintf(stderr, "dispatch_request_fuzz: %s: %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

bool HasNul(std::string_view s) { return s.find('\0') != s.npos; }

const cfdb::worker::Worker& TheWorker() {
  static const auto* worker = [] {
    auto* w = new cfdb::worker::Worker(cfdb::worker::WorkerOptions{});
    if (!w->RegisterKind(cfdb::worker::kExecKind, cfdb::worker::ExecKind())
             .ok()) {
      Fail("cannot register exec");
    }
    return w;
  }();
  return *worker;
}

void CheckAccepted(const JobRequest& r) {
  if (r.job_id.empty() || r.job_id.size() > 256) Fail("job_id length");
  if (!std::all_of(r.job_id.begin(), r.job_id.end(),
                   [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    Fail("job_id not printable", r.job_id);
  }
  if (r.kind != cfdb::worker::kExecKind) Fail("unregistered kind", r.kind);
  const cfdb::worker::ExecSpec* spec = cfdb::worker::FindExec(r);
  if (spec == nullptr) Fail("an exec job without an ExecSpec");
  const auto& exec = *spec;
  if (exec.argv.empty() || exec.argv[0].empty()) Fail("no program");
  size_t bytes = 0;
  for (const std::string& arg : exec.argv) {
    if (HasNul(arg)) Fail("NUL in argv", arg);
    bytes += arg.size() + 1;
  }
  for (const auto& [name, value] : exec.env) {
    if (name.empty() || name.find('=') != name.npos) Fail("env name", name);
    if (HasNul(name) || HasNul(value)) Fail("NUL in env", name);
    bytes += name.size() + value.size() + 2;
  }
  if (bytes > (1u << 20)) Fail("argv + env over the limit");
  if (HasNul(exec.cwd)) Fail("NUL in cwd", exec.cwd);
  if (exec.time_limit < Duration::zero()) Fail("negative time limit");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in a string field is a parse failure, logged each time.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cfdb::worker::v1::DispatchRequest proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;

  absl::StatusOr<JobRequest> request = cfdb::worker::wire::FromProto(proto);
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("FromProto: not INVALID_ARGUMENT", request.status().ToString());
    }
    return 0;
  }
  // What the client library sends for this request converts back to it.
  absl::StatusOr<JobRequest> again =
      cfdb::worker::wire::FromProto(cfdb::worker::wire::ToProto(*request));
  if (!again.ok()) Fail("round trip refused", again.status().ToString());
  const cfdb::worker::ExecSpec* before = cfdb::worker::FindExec(*request);
  const cfdb::worker::ExecSpec* after = cfdb::worker::FindExec(*again);
  if (again->job_id != request->job_id || again->kind != request->kind ||
      again->payload != request->payload ||
      (before == nullptr) != (after == nullptr) ||
      (before != nullptr &&
       (after->argv != before->argv || after->env != before->env ||
        after->cwd != before->cwd ||
        after->stdin_data != before->stdin_data))) {
    Fail("round trip changed the request");
  }

  const absl::Status valid = TheWorker().Validate(*request);
  if (!valid.ok()) {
    if (valid.code() != absl::StatusCode::kInvalidArgument) {
      Fail("Validate: not INVALID_ARGUMENT", valid.ToString());
    }
    return 0;
  }
  CheckAccepted(*request);
  return 0;
}

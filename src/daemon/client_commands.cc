// `cfdb-worker idle|stop|dispatch`: the binary as a client of any worker.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "daemon/client_calls.h"
#include "daemon/commands.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {
namespace {

// WhatItMeans says what a kind promises about the job, where that is not
// plain from its name.
std::string_view WhatItMeans(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOutcomeUnknown:
      return " -- the job was accepted and started; whether it finished is "
             "unknown, so do not resend it blindly";
    case ErrorKind::kAcceptedDeadlineExceeded:
      return " -- the job was accepted and started; the worker cancels it now "
             "that the call has ended";
    case ErrorKind::kMaybeStarted:
      return " -- the worker may have started the job before the deadline "
             "(and cancels it now): do not resend it blindly";
    default:
      return "";
  }
}

// Fail reports a failed call in one line and returns its exit code.
int Fail(Rpc rpc, std::string_view address, const absl::Status& status) {
  const ErrorKind kind = ClassifyError(rpc, status);
  std::cerr << "cfdb-worker: " << address << ": " << ErrorKindName(kind) << " ("
            << absl::StatusCodeToString(status.code())
            << "): " << status.message() << WhatItMeans(kind) << "\n";
  return ExitCodeFor(kind);
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the reader went away; nothing useful to do
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

int RunIdle(const ClientOptions& options) {
  auto connection = Connect(options.address, options);
  if (!connection.ok())
    return Fail(Rpc::kIdle, options.address, connection.status());
  absl::StatusOr<double> idle = WithRetries(options.attempts, Rpc::kIdle, [&] {
    return (*connection)->IdleTime(options.timeout);
  });
  if (!idle.ok()) return Fail(Rpc::kIdle, options.address, idle.status());
  std::cout << absl::StrFormat("%.3f", *idle) << "\n";
  return kExitOk;
}

int RunHealth(const ClientOptions& options, const std::string& service) {
  auto connection = Connect(options.address, options);
  if (!connection.ok())
    return Fail(Rpc::kHealth, options.address, connection.status());
  absl::StatusOr<WorkerConnection::ServingStatus> status = WithRetries(
      options.attempts, Rpc::kHealth,
      [&] { return (*connection)->Health(options.timeout, service); });
  if (!status.ok()) return Fail(Rpc::kHealth, options.address, status.status());
  switch (*status) {
    case WorkerConnection::ServingStatus::kServing:
      std::cout << "SERVING\n";
      return kExitOk;
    case WorkerConnection::ServingStatus::kNotServing:
      std::cout << "NOT_SERVING\n";
      return kExitRuntimeFailure;
    case WorkerConnection::ServingStatus::kUnknown:
      break;
  }
  std::cout << "UNKNOWN\n";
  return kExitRuntimeFailure;
}

int RunStop(const ClientOptions& options, double grace_seconds) {
  auto connection = Connect(options.address, options);
  if (!connection.ok())
    return Fail(Rpc::kStop, options.address, connection.status());
  const Duration grace = GraceFromSeconds(grace_seconds);
  absl::StatusOr<StopSummary> summary =
      WithRetries(options.attempts, Rpc::kStop,
                  [&] { return (*connection)->Stop(grace, options.timeout); });
  if (!summary.ok()) return Fail(Rpc::kStop, options.address, summary.status());
  std::cout << "stopped: " << summary->drained << " jobs drained, "
            << summary->cancelled << " cancelled\n";
  return kExitOk;
}

int RunDispatch(const ClientOptions& options, const DispatchOptions& dispatch) {
  JobRequest request;
  request.job_id =
      dispatch.job_id.empty()
          ? absl::StrCat(
                "cli-", getpid(), "-",
                std::chrono::system_clock::now().time_since_epoch().count())
          : dispatch.job_id;
  request.kind = "exec";
  MutableExec(request).argv = dispatch.argv;
  MutableExec(request).env = dispatch.env;
  MutableExec(request).cwd = dispatch.cwd;
  MutableExec(request).time_limit =
      ToDuration(Seconds(dispatch.time_limit_seconds));
  // Stdin is streamed unless it is a terminal (as before: a job should not
  // wait on someone's keyboard by accident), it was closed, or --no-stdin
  // says no. A stdin inherited from our parent has no close-on-exec flag
  // (it survived the exec); a descriptor 0 that has one was opened in this
  // process (gRPC's libraries open an eventfd before main), so the real
  // stdin was closed (`<&-`) and fd 0 is not ours to read.
  const int stdin_flags = fcntl(STDIN_FILENO, F_GETFD);
  const bool stream_stdin = dispatch.read_stdin && stdin_flags != -1 &&
                            (stdin_flags & FD_CLOEXEC) == 0 &&
                            !isatty(STDIN_FILENO);
  auto connection = Connect(options.address, options);
  if (!connection.ok()) {
    return Fail(Rpc::kDispatch, options.address, connection.status());
  }
  DispatchCallbacks callbacks;
  callbacks.on_output = [](OutputStream stream, std::string_view data) {
    WriteAll(stream == OutputStream::kStdout ? STDOUT_FILENO : STDERR_FILENO,
             data);
  };
  std::optional<Duration> timeout;
  if (options.timeout > Duration::zero()) timeout = options.timeout;
  absl::StatusOr<JobOutcome> outcome =
      WithRetries(options.attempts, Rpc::kDispatch, [&] {
        return stream_stdin
                   ? (*connection)
                         ->DispatchStream(request, STDIN_FILENO, callbacks,
                                          timeout)
                   : (*connection)->Dispatch(request, callbacks, timeout);
      });
  if (stream_stdin && absl::IsUnimplemented(outcome.status()) &&
      !Accepted(outcome.status())) {
    // A worker from before DispatchStream: none of stdin was read (that
    // starts at acceptance), so it goes whole in the request, as it did.
    spdlog::warn("{}: the worker predates streamed stdin; sending it whole",
                 options.address);
    MutableExec(request).stdin_data.assign(
        std::istreambuf_iterator<char>(std::cin),
        std::istreambuf_iterator<char>());
    outcome = WithRetries(options.attempts, Rpc::kDispatch, [&] {
      return (*connection)->Dispatch(request, callbacks, timeout);
    });
  }
  if (!outcome.ok())
    return Fail(Rpc::kDispatch, options.address, outcome.status());
  if (outcome->kind == JobOutcome::Kind::kFailed) {
    std::cerr << "cfdb-worker: job " << request.job_id << " "
              << outcome->ToString() << "\n";
  }
  return outcome->ShellStatus();
}

}  // namespace cfdb::worker::cli

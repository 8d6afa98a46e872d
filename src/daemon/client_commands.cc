// `cfdb-worker idle|health|stop`: the binary as a client of any worker, and
// what every client command shares (client_calls.h).
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
#include "rpc/tls_probe.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {

int Fail(Rpc rpc, const ClientOptions& options, const absl::Status& failed) {
  const std::string& address = options.address;
  const absl::Status status = Explained(rpc, address, options, failed);
  const ErrorKind kind = ClassifyError(rpc, status);
  std::cerr << "cfdb-worker: " << address << ": " << ErrorKindName(kind) << " ("
            << absl::StatusCodeToString(status.code())
            << "): " << status.message();
  if (!ErrorKindMeaning(kind).empty()) {
    std::cerr << " -- " << ErrorKindMeaning(kind);
  }
  std::cerr << "\n";
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

absl::Status Explained(Rpc rpc, const std::string& address,
                       const ClientOptions& options,
                       const absl::Status& status) {
  if (options.credentials.kind != Credentials::Kind::kInsecure ||
      ClassifyError(rpc, status) != ErrorKind::kTransient ||
      !absl::IsUnavailable(status) ||
      !SpeaksTls(address, std::chrono::seconds(2))) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), "; the worker at ", address,
                   " speaks TLS: pass --tls-ca, --tls-cert and --tls-key"));
}

int RunIdle(const ClientOptions& options) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kIdle, options, connection.status());
  absl::StatusOr<double> idle = WithRetries(options.attempts, Rpc::kIdle, [&] {
    return (*connection)->IdleTime(options.timeout);
  });
  if (!idle.ok()) return Fail(Rpc::kIdle, options, idle.status());
  std::cout << absl::StrFormat("%.3f", *idle) << "\n";
  return kExitOk;
}

int RunHealth(const ClientOptions& options, const std::string& service) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kHealth, options, connection.status());
  absl::StatusOr<WorkerConnection::ServingStatus> status = WithRetries(
      options.attempts, Rpc::kHealth,
      [&] { return (*connection)->Health(options.timeout, service); });
  if (!status.ok()) return Fail(Rpc::kHealth, options, status.status());
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

int RunStop(const ClientOptions& options, double grace_seconds,
            std::optional<double> if_idle_for_seconds) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kStop, options, connection.status());
  const Duration grace = GraceFromSeconds(grace_seconds);
  std::optional<Duration> if_idle_for;
  if (if_idle_for_seconds) {
    if_idle_for = ToDuration(Seconds(*if_idle_for_seconds));
  }
  absl::StatusOr<StopSummary> summary = WithRetries(
      options.attempts, Rpc::kStop,
      [&] { return (*connection)->Stop(grace, options.timeout, if_idle_for); });
  if (!summary.ok()) return Fail(Rpc::kStop, options, summary.status());
  std::cout << "stopped: " << summary->drained << " jobs drained, "
            << summary->cancelled << " cancelled\n";
  return kExitOk;
}

}  // namespace cfdb::worker::cli

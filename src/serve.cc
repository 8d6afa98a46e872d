// `cfdb-worker serve`: the worker, its server and its reaper in one process.
#include <unistd.h>

#include <csignal>

#include "cfdb/worker/config.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/reaper.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/worker.h"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/log.h"
#include "commands.h"
#include "orphans.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {

// After the drain, calls still open (e.g. a Stop reply on its way out) get
// this long to finish before the server cancels them.
constexpr auto kServerShutdownDeadline = std::chrono::seconds(5);

int RunServe(const ServeConfig& config) {
  // A write to a job's closed stdin must not kill the worker.
  std::signal(SIGPIPE, SIG_IGN);
  // The worker starts no threads until it runs a job. `shutdown` is declared
  // after it so its signal thread is joined before the worker goes away.
  Worker worker(config.worker);
  Shutdown shutdown;
  // Before any thread starts, so every thread inherits the blocked signals.
  absl::Status listening = shutdown.ListenForSignals([&](int count) {
    spdlog::warn("signal {} during the drain: cancelling what is left", count);
    worker.Stop(Duration::zero());
  });
  if (!listening.ok()) {
    spdlog::error("cannot listen for signals: {}", listening.ToString());
    return kExitRuntimeFailure;
  }
  // As PID 1 of a container, or under an init that does not reap, orphans
  // of jobs are ours to reap.
  absl::StatusOr<std::unique_ptr<OrphanReaper>> orphans =
      OrphanReaper::Start(std::chrono::milliseconds(500));
  if (!orphans.ok()) {
    spdlog::warn("orphaned job processes will not be reaped: {}",
                 orphans.status().ToString());
  }

  (void)worker.RegisterKind(kExecKind, RunExec);
  const Credentials& credentials = config.credentials;
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(
      worker, ServerOptions{
                  .address = JoinHostPort(config.host, config.port),
                  .credentials = credentials,
                  .on_stop_rpc = [&] { shutdown.Stop(StopCause::kStopRpc); },
              });
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return kExitRuntimeFailure;
  }
  if (credentials.kind == Credentials::Kind::kInsecure) {
    spdlog::warn("serving without TLS: any client that can reach {} may run "
                 "programs here", JoinHostPort(config.host, (*server)->port()));
  }
  const int port = (*server)->port();
  LogEvent(spdlog::level::info,
           absl::StrCat("listening on ", JoinHostPort(config.host, port),
                        " (pid ", getpid(), ")"),
           {{"address", JoinHostPort(config.host, port)},
            {"pid", static_cast<int64_t>(getpid())},
            {"tls", credentials.kind == Credentials::Kind::kMutualTls},
            {"max_concurrent_tasks", config.worker.max_concurrent_tasks},
            {"idle_timeout_seconds", ToSeconds(config.reaper.idle_timeout)},
            {"max_lifetime_seconds", ToSeconds(config.reaper.max_lifetime)}});

  Reaper reaper(
      config.reaper, SteadyClock::Get(), shutdown.watcher(),
      SelfPollFactory(config.host, port, credentials),
      [&](Duration grace) {
        const StopSummary s = worker.Stop(grace);
        LogEvent(spdlog::level::info, "drained",
                 {{"drained", s.drained}, {"cancelled", s.cancelled}});
      });
  reaper.Run();
  // A Stop RPC drains on its own thread: wait for it without changing its
  // grace.
  worker.Stop(Duration(-1));
  (*server)->Shutdown(kServerShutdownDeadline);
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace cfdb::worker::cli

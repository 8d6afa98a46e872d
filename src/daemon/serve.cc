// `cfdb-worker serve`: the worker, its server and its retirement policy in
// one process.
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/containment.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/worker.h"
#include "core/log.h"
#include "daemon/address.h"
#include "daemon/commands.h"
#include "daemon/config.h"
#include "daemon/identity.h"
#include "daemon/retirement.h"
#include "daemon/self_poll.h"
#include "exec/job_guard.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {
namespace {

// After the drain, calls still open (e.g. a Stop reply on its way out) get
// this long to finish before the server cancels them.
constexpr auto kServerShutdownDeadline = std::chrono::seconds(5);
// Past that deadline, this long more for gRPC's shutdown to end.
constexpr unsigned kShutdownStallSeconds = 10;

// OnSignal turns each SIGTERM/SIGINT into a stop request: the first drains
// with the signal grace, counted from its arrival; any later one cancels
// what is left at once.
void OnSignal(Worker& worker, Duration signal_grace, int signo, int count) {
  const std::string name(SignalName(signo));
  if (count == 1) {
    worker.RequestStop({.source = name, .grace = signal_grace});
    return;
  }
  spdlog::warn("signal {} during the drain: cancelling what is left", count);
  worker.RequestStop(
      {.source = absl::StrCat(name, " again"), .grace = Duration::zero()});
}

// AwaitDrain waits for the worker's drain to end. A drain begun by a signal
// or a Stop RPC before the max lifetime is still bounded by it: when the
// lifetime ends first, it joins the drain as a request of its own.
DrainReport AwaitDrain(Worker& worker, const RetirementPolicy& policy,
                       const Retirement& retirement, Duration lifetime_grace) {
  if (retirement.reason != ExitReason::kMaxLifetime) {
    if (auto report = worker.WaitDrainedUntil(policy.lifetime_end())) {
      return *report;
    }
    spdlog::info("max lifetime reached during the drain");
    worker.RequestStop(
        {.source = std::string(ExitReasonName(ExitReason::kMaxLifetime)),
         .grace = lifetime_grace});
  }
  return worker.WaitDrained();
}

// WarnAboutIdentity says, once, what a job may reach that it should not.
void WarnAboutIdentity(const ServeConfig& config) {
  if (!config.job_user) {
    spdlog::warn(
        "jobs run as the worker's own user (uid {}): a job can read the "
        "worker's credentials and signal it; set --job-user (docs/SECURITY.md)",
        geteuid());
  }
  for (const std::string& problem : CredentialFileProblems(
           {config.credentials.ca_file, config.credentials.cert_file,
            config.credentials.key_file})) {
    spdlog::warn("credential file: {}", problem);
  }
}

void LogDrain(const DrainReport& report) {
  LogEvent(spdlog::level::info,
           absl::StrFormat("drained in %.3f s: %d finished, %d cancelled",
                           ToSeconds(report.took), report.summary.drained,
                           report.summary.cancelled),
           {{"drained", report.summary.drained},
            {"cancelled", report.summary.cancelled},
            {"drain_seconds", ToSeconds(report.took)},
            {"stop_requests", report.requests},
            {"deadline_source", report.deadline_source}});
}

}  // namespace

int RunServe(const ServeConfig& config) {
  // A write to a job's closed stdin must not kill the worker.
  std::signal(SIGPIPE, SIG_IGN);
  // Forked while this is the only thread (the worker starts its drain
  // thread): it kills the jobs' process groups if this process dies.
  absl::StatusOr<std::unique_ptr<JobGuard>> guard = JobGuard::Start();
  if (!guard.ok()) {
    spdlog::warn("jobs will not be killed if the worker dies outright: {}",
                 guard.status().ToString());
  }
  // Every process a job starts ends with it; as PID 1 of a container, or
  // under an init that does not reap, orphans are ours to reap too. Made
  // before privileges are dropped (a cgroup subtree may need them).
  absl::StatusOr<std::unique_ptr<Containment>> containment =
      Containment::Start(config.containment);
  if (!containment.ok()) {
    spdlog::error("{}", containment.status().ToString());
    return kExitRuntimeFailure;
  }
  if (guard.ok()) (*containment)->Spare((*guard)->pid());
  if (config.worker_user && geteuid() == 0) {
    if (absl::Status s =
            (*containment)
                ->Delegate(config.worker_user->uid, config.worker_user->gid);
        !s.ok()) {
      spdlog::error("{}", s.ToString());
      return kExitRuntimeFailure;
    }
  }
  // While this is the only thread: the daemon keeps only what it needs.
  if (absl::Status s =
          BecomeWorker(config.worker_user, config.job_user.has_value());
      !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  WarnAboutIdentity(config);
  // PEMs given in variables become files only this user may read.
  Credentials credentials = config.credentials;
  if (!config.tls.ca.pem.empty() || !config.tls.cert.pem.empty() ||
      !config.tls.key.pem.empty()) {
    absl::StatusOr<Credentials> written =
        WritePemFiles(config.tls, credentials);
    if (!written.ok()) {
      spdlog::error("{}", written.status().ToString());
      return kExitRuntimeFailure;
    }
    credentials = *written;
  }
  spdlog::info("{}", (*containment)->Describe());
  // Before any thread starts, so every thread inherits the blocked signals.
  if (absl::Status s = BlockStopSignals(); !s.ok()) {
    spdlog::error("cannot block signals: {}", s.ToString());
    return kExitRuntimeFailure;
  }
  // `shutdown` is declared after the worker so its signal thread, which
  // calls the worker, is joined before the worker goes away.
  Worker worker(config.worker);
  Shutdown shutdown;
  absl::Status listening = shutdown.ListenForSignals(
      [&worker, grace = config.retirement.signal_grace](int signo, int count) {
        OnSignal(worker, grace, signo, count);
      });
  if (!listening.ok()) {
    spdlog::error("cannot listen for signals: {}", listening.ToString());
    return kExitRuntimeFailure;
  }
  (*containment)->StartSweeping();
  ExecOptions exec = config.exec;
  exec.containment = containment->get();
  (void)worker.RegisterKind(kExecKind, ExecKind(exec));
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
    spdlog::warn(
        "serving without TLS: any client that can reach {} may run "
        "programs here",
        JoinHostPort(config.host, (*server)->port()));
  }
  const int port = (*server)->port();
  LogEvent(
      spdlog::level::info,
      absl::StrCat("listening on ", JoinHostPort(config.host, port), " (pid ",
                   getpid(), ")"),
      {{"address", JoinHostPort(config.host, port)},
       {"pid", static_cast<int64_t>(getpid())},
       {"tls", credentials.kind == Credentials::Kind::kMutualTls},
       {"max_concurrent_tasks", config.worker.max_concurrent_tasks},
       {"idle_timeout_seconds", ToSeconds(config.retirement.idle_timeout)},
       {"max_lifetime_seconds", ToSeconds(config.retirement.max_lifetime)}});

  RetirementPolicy policy(config.retirement, SteadyClock::Get(),
                          shutdown.watcher(),
                          SelfPollFactory(config.host, port, credentials),
                          [&worker](StopRequest request) {
                            worker.RequestStop(std::move(request));
                          });
  const Retirement retirement = policy.Run();
  LogDrain(AwaitDrain(worker, policy, retirement,
                      config.retirement.max_lifetime_grace));
  // gRPC's own shutdown can stall (seen when jobs had used up the process
  // budget); past its bound the daemon exits anyway, saying so.
  struct sigaction stalled {};
  stalled.sa_handler = [](int) {
    constexpr char kMessage[] =
        "cfdb-worker: gRPC's shutdown stalled; exiting anyway\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    _exit(kExitRuntimeFailure);
  };
  sigaction(SIGALRM, &stalled, nullptr);
  alarm(static_cast<unsigned>(kServerShutdownDeadline.count()) +
        kShutdownStallSeconds);
  (*server)->Shutdown(kServerShutdownDeadline);
  alarm(0);
  if (credentials.ca_file != config.credentials.ca_file) {
    std::error_code ignored;  // the PEM files written above
    std::filesystem::remove_all(
        std::filesystem::path(credentials.key_file).parent_path(), ignored);
  }
  spdlog::info("stopped");
  return kExitOk;
}

}  // namespace cfdb::worker::cli

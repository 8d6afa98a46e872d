// Serve (cfdb/worker/serve.h), which `cfdb-worker serve` runs: the worker,
// its server and its retirement policy in one process.
#include "cfdb/worker/serve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <filesystem>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/containment.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/worker.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "core/text.h"
#include "exec/job_guard.h"
#include "serve/address.h"
#include "serve/config.h"
#include "serve/http_endpoint.h"
#include "serve/identity.h"
#include "serve/lock_order.h"
#include "serve/logging.h"
#include "serve/memory_trim.h"
#include "serve/metrics.h"
#include "serve/pod_deletion_cost.h"
#include "serve/prometheus_metrics.h"
#include "serve/retirement.h"
#include "serve/scale_in.h"
#include "serve/self_poll.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

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
void WarnAboutIdentity(const PreparedServe& prepared) {
  const ServeConfig& config = prepared.config;
  if (!config.job_user) {
    spdlog::warn(
        "jobs run as the worker's own user (uid {}): a job can read the "
        "worker's credentials and signal it; set --job-user (docs/SECURITY.md)",
        geteuid());
  }
  for (const std::string& problem :
       CredentialFileProblems({{prepared.credentials.ca_file},
                               {prepared.credentials.cert_file},
                               {prepared.credentials.key_file, true}})) {
    spdlog::warn("credential file: {}", problem);
  }
}

// RaiseDescriptorLimit raises the soft RLIMIT_NOFILE to the hard limit, so
// that a burst of connections cannot starve the listener (gRPC 1.51 stops
// accepting for good after EMFILE), and returns the soft limit it found,
// which jobs get back (ExecOptions::nofile).
rlim_t RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  const rlim_t original = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      spdlog::warn("cannot raise the descriptor limit to {}: {}",
                   limit.rlim_max, ErrnoText(errno));
      return 0;
    }
    spdlog::info("descriptor limit raised from {} to {}; jobs get {}", original,
                 limit.rlim_max, original);
  }
  return original;
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

// StartScaleInProtection starts the ECS scale-in protection if it is on
// and the ECS agent can be reached; says so, or why not, once.
std::unique_ptr<ScaleInProtection> StartScaleInProtection(
    const ScaleInOptions& scale_in) {
  if (!scale_in.enabled) return nullptr;
  if (scale_in.agent_uri.empty()) {
    spdlog::warn(
        "--ecs-scale-in-protection: ECS_AGENT_URI is not set (not on ECS, or "
        "an agent too old for task protection): carrying on without "
        "scale-in protection");
    return nullptr;
  }
  auto protection = std::make_unique<ScaleInProtection>(
      scale_in.expires, scale_in.hold,
      CurlAgentClient(scale_in.agent_uri, kAgentCallTimeout));
  spdlog::info(
      "scale-in protection: on; enabled while a job is in flight and for "
      "{:.1f} "
      "s after the last, for {} min at a time, renewed at half of that",
      ToSeconds(scale_in.hold),
      std::chrono::duration_cast<std::chrono::minutes>(scale_in.expires)
          .count());
  return protection;
}

// StartDeletionCost starts the pod deletion cost if it is on (PrepareServe
// checked that the pod and its service account are there).
std::unique_ptr<ScaleInProtection> StartDeletionCost(
    const PodDeletionCostOptions& o) {
  if (!o.enabled) return nullptr;
  // The annotations do not expire: the longest expiry makes its renewal
  // (which also restores an annotation someone removed) daily.
  auto marks = std::make_unique<ScaleInProtection>(
      std::chrono::minutes(kMaxProtectionExpiresMinutes), o.hold,
      KubernetesPodClient(o, kAgentCallTimeout));
  spdlog::info(
      "pod deletion cost: on for pod {}/{} at {}; marked busy while a job is "
      "in flight and for {:.1f} s after the last",
      o.pod_namespace, o.pod_name, o.api_server, ToSeconds(o.hold));
  return marks;
}

// StartMetrics starts the EMF metrics if they are on (an interval, and JSON
// logs to carry them).
std::unique_ptr<MetricsReporter> StartMetrics(const ServeConfig& config,
                                              const Worker& worker,
                                              const RetirementPolicy& policy) {
  if (config.metrics_interval <= Duration::zero()) return nullptr;
  if (!JsonLogs()) {
    spdlog::info(
        "metrics: off, as they are EMF lines of a JSON log "
        "(--log-format json)");
    return nullptr;
  }
  return std::make_unique<MetricsReporter>(
      config.metrics_interval, config.metrics_service,
      [&worker, &policy] {
        return MetricsSnapshot{.in_flight = worker.docket().in_flight(),
                               .jobs = worker.counts(),
                               .idle_seconds = ToSeconds(worker.Idle()),
                               .poll_failures = policy.poll_failures()};
      },
      &WriteJsonLogLine);
}

// WallSeconds is steady-clock `at` as Unix seconds, by the clocks' offset
// now.
double WallSeconds(TimePoint at) {
  const auto wall = std::chrono::system_clock::now();
  return ToSeconds(wall.time_since_epoch()) +
         ToSeconds(at - std::chrono::steady_clock::now());
}

// ReadMetrics is the worker as a scrape reads it now.
// The parts of a serving worker the metrics read.
struct Observed {
  const ServeConfig& config;
  const Worker& worker;
  WorkerServer& server;
  const RetirementPolicy& policy;
  const ScaleInProtection* protection;     // null: off
  const ScaleInProtection* deletion_cost;  // null: off
  const JobHistograms& histograms;
  TimePoint started;  // the process's start, for the uptime
};

MetricsReading ReadMetrics(const Observed& o) {
  const ServeConfig& config = o.config;
  const Worker& worker = o.worker;
  const RetirementPolicy& policy = o.policy;
  const RetirementPolicy::Reading seen = policy.reading();
  MetricsReading r{.in_flight = worker.docket().in_flight(),
                   .max_concurrent = config.worker.max_concurrent_tasks,
                   .idle_seconds = ToSeconds(worker.Idle()),
                   .jobs = worker.counts(),
                   .draining = worker.stopping(),
                   .policy = seen,
                   .rpcs = o.server.counts(),
                   .version = CFDB_WORKER_VERSION,
                   .histograms = &o.histograms};
  if (o.protection != nullptr) {
    r.scale_in_protected = o.protection->applied();
    const int failed = o.protection->failed_calls();
    r.agent_calls_failed = static_cast<uint64_t>(failed);
    r.agent_calls_ok = static_cast<uint64_t>(o.protection->calls() - failed);
  }
  if (o.deletion_cost != nullptr) {
    const int failed = o.deletion_cost->failed_calls();
    r.kubernetes_calls_failed = static_cast<uint64_t>(failed);
    r.kubernetes_calls_ok =
        static_cast<uint64_t>(o.deletion_cost->calls() - failed);
  }
  r.retained = r.jobs.known;
  if (const std::optional<StopState> stop = worker.stop_state()) {
    r.drain_deadline = stop->deadline == TimePoint::max()
                           ? std::numeric_limits<double>::infinity()
                           : WallSeconds(stop->deadline);
  }
  const Duration timeout = config.retirement.idle_timeout;
  if (timeout > Duration::zero() && r.in_flight == 0 && !r.draining) {
    r.idle_retirement = WallSeconds(std::chrono::steady_clock::now()) +
                        std::max(0.0, ToSeconds(timeout) - r.idle_seconds);
  }
  if (seen.lifetime_end && !r.draining) {
    r.lifetime_retirement = WallSeconds(*seen.lifetime_end);
  }
  return r;
}

// StartHttp starts the plain-HTTP port if one is configured (null if not).
absl::StatusOr<std::unique_ptr<HttpEndpoint>> StartHttp(const Observed& o,
                                                        LogThrottle& log) {
  const ServeConfig& config = o.config;
  if (config.http_port < 0) return nullptr;
  const std::string host =
      config.http_host.empty() ? config.host : config.http_host;
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = HttpEndpoint::Start(
      host, config.http_port,
      HttpHandlers{
          .metrics =
              [o] { return RenderMetrics(ReadMetrics(o), ReadProcess()); },
          .healthy = [&policy =
                          o.policy] { return !policy.reading().listener_lost; },
          .ready = [&worker = o.worker] { return !worker.stopping(); }},
      log);
  if (!endpoint.ok()) return endpoint.status();
  LogEvent(
      spdlog::level::info,
      absl::StrCat("http: /metrics, /healthz and /readyz on ",
                   JoinHostPort(host, (*endpoint)->port()), " (plaintext)"),
      {{"http_address", JoinHostPort(host, (*endpoint)->port())}});
  return endpoint;
}

// StatusOf is the serve loop's part of a Status reply: the same reading
// as the metrics', the earlier retirement of the two rules.
ServeStatus StatusOf(const Observed& o) {
  const MetricsReading r = ReadMetrics(o);
  ServeStatus status{.version = r.version,
                     .uptime = std::chrono::steady_clock::now() - o.started,
                     .scale_in_protected = r.scale_in_protected,
                     .identity = o.config.tls.identity};
  const bool idle_first =
      r.idle_retirement &&
      (!r.lifetime_retirement || *r.idle_retirement <= *r.lifetime_retirement);
  if (idle_first) {
    status.retires_at_unix_seconds = r.idle_retirement;
    status.retirement_rule = "idle";
  } else if (r.lifetime_retirement) {
    status.retires_at_unix_seconds = r.lifetime_retirement;
    status.retirement_rule = "max_lifetime";
  }
  return status;
}

// ServeObservers answers who looks from outside: the Status RPC's part,
// and the HTTP port if one is configured (null if not).
absl::StatusOr<std::unique_ptr<HttpEndpoint>> ServeObservers(const Observed& o,
                                                             LogThrottle& log) {
  o.server.OnStatus([o] { return StatusOf(o); });
  return StartHttp(o, log);
}

// CanOpenDescriptor says whether this process can open a descriptor now: a
// listener check that was not answered counts only then.
bool CanOpenDescriptor() {
  const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// AcceptFailureWatch has the policy check its listener at once whenever
// gRPC says it could not accept a connection, for as long as it lives.
class AcceptFailureWatch {
 public:
  AcceptFailureWatch(RetirementPolicy& policy, Shutdown& shutdown) {
    OnGrpcAcceptFailure([&policy, &shutdown] {
      policy.CheckListenerSoon();
      shutdown.Wake();
    });
  }
  ~AcceptFailureWatch() { OnGrpcAcceptFailure(nullptr); }
  AcceptFailureWatch(const AcceptFailureWatch&) = delete;
  AcceptFailureWatch& operator=(const AcceptFailureWatch&) = delete;
};

// The process made ready to be a worker, before any thread starts.
struct Process {
  // The descriptor limit jobs get back (ExecOptions::nofile).
  rlim_t nofile = 0;
  // Null when the guard could not be started (said in the log).
  std::unique_ptr<JobGuard> guard;
  std::unique_ptr<Containment> containment;
};

// Failure logs `line` as an error and returns it with `code`, for Serve's
// callers (serve.h says which code means what).
absl::Status Failure(absl::StatusCode code, const std::string& line) {
  spdlog::error("{}", line);
  return absl::Status(code, line);
}

// PrepareProcess does what must be done while this is the only thread: the
// job guard is forked, privileges dropped, the stop signals blocked (so
// every later thread inherits them blocked). Logs what fails.
absl::Status PrepareProcess(const PreparedServe& prepared, Process& process) {
  const ServeConfig& config = prepared.config;
  // A write to a job's closed stdin must not kill the worker.
  std::signal(SIGPIPE, SIG_IGN);
  SetHeapPolicy();
  IgnoreLockOrderCycles();
  process.nofile = RaiseDescriptorLimit();
  // It kills the jobs' process groups if this process dies.
  absl::StatusOr<std::unique_ptr<JobGuard>> guard = JobGuard::Start();
  if (guard.ok()) {
    process.guard = *std::move(guard);
  } else {
    spdlog::warn("jobs will not be killed if the worker dies outright: {}",
                 guard.status().ToString());
  }
  // Every process a job starts ends with it; as PID 1 of a container, or
  // under an init that does not reap, orphans are ours to reap too. Made
  // before privileges are dropped (a cgroup subtree may need them).
  absl::StatusOr<std::unique_ptr<Containment>> containment =
      Containment::Start(config.containment);
  if (!containment.ok()) {
    return Failure(absl::StatusCode::kFailedPrecondition,
                   containment.status().ToString());
  }
  process.containment = *std::move(containment);
  if (process.guard != nullptr)
    process.containment->Spare(process.guard->pid());
  if (config.worker_user && geteuid() == 0) {
    if (absl::Status s = process.containment->Delegate(config.worker_user->uid,
                                                       config.worker_user->gid);
        !s.ok()) {
      return Failure(absl::StatusCode::kFailedPrecondition, s.ToString());
    }
  }
  // The daemon keeps only what it needs.
  if (absl::Status s =
          BecomeWorker(config.worker_user, config.job_user.has_value());
      !s.ok()) {
    return Failure(absl::StatusCode::kPermissionDenied,
                   std::string(s.message()));
  }
  WarnAboutIdentity(prepared);
  if (absl::Status s = BlockStopSignals(); !s.ok()) {
    return Failure(absl::StatusCode::kFailedPrecondition,
                   absl::StrCat("cannot block signals: ", s.ToString()));
  }
  return absl::OkStatus();
}

// StartCredentialMirror starts, for mutual TLS, the private copy of the TLS
// files the server and the self-poll use: it only changes to a consistent
// set that the self-poll can succeed with, and lives in memory only, so no
// copy of the key outlives the process. Null without TLS.
absl::StatusOr<std::unique_ptr<CredentialMirror>> StartCredentialMirror(
    const PreparedServe& prepared) {
  const ServeConfig& config = prepared.config;
  if (prepared.credentials.kind != Credentials::Kind::kMutualTls) {
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<CredentialMirror>> mirror =
      CredentialMirror::Start(config.tls, prepared.self_poll);
  if (!mirror.ok()) return mirror.status();
  (*mirror)->Watch();
  const Credentials& served = (*mirror)->credentials();
  spdlog::info(
      "TLS: serving a checked private copy of the files, in memory only ({} "
      "and {} of pid {}); the files are re-read every {} s",
      served.ca_file, served.key_file, getpid(),
      ToSeconds(config.tls.refresh_interval));
  return mirror;
}

// LogListening says where the worker listens, and warns of who may call it.
void LogListening(const ServeConfig& config, const Credentials& credentials,
                  int port, bool exec_kind) {
  const std::string address = JoinHostPort(config.host, port);
  if (credentials.kind == Credentials::Kind::kInsecure) {
    spdlog::warn("serving without TLS: any client that can reach {} may run {}",
                 address, exec_kind ? "programs here" : "jobs here");
  } else if (config.admit.empty()) {
    spdlog::warn(
        "no admission lists: every certificate the CA signed may call every "
        "method, Dispatch and Stop included; set --tls-admit-control and "
        "--tls-admit-observe (docs/SECURITY.md)");
  }
  LogEvent(spdlog::level::info,
           absl::StrCat("listening on ", address, " (pid ", getpid(), ")"),
           {{"address", address},
            {"pid", static_cast<int64_t>(getpid())},
            {"tls", credentials.kind == Credentials::Kind::kMutualTls},
            {"max_concurrent_tasks", config.worker.max_concurrent_tasks},
            {"idle_timeout_seconds", ToSeconds(config.retirement.idle_timeout)},
            {"max_lifetime_configured_seconds",
             ToSeconds(config.retirement.max_lifetime)},
            {"listener_check_interval_seconds",
             ToSeconds(config.retirement.listener_check_interval)}});
  if (!config.unix_socket.empty()) {
    LogEvent(spdlog::level::info,
             absl::StrCat(
                 "also listening on unix:", EscapedForLog(config.unix_socket),
                 " (owner-only, without TLS)"),
             {{"unix_socket", EscapedForLog(config.unix_socket)}});
  }
}

// BoundTheShutdown arms an alarm that ends the process, saying so, if gRPC's
// shutdown stalls (seen when jobs had used up the process budget). It stays
// armed when Serve returns: the server's and the worker's teardown run as
// Serve returns, and gRPC's own (grpc_shutdown) on the way out.
void BoundTheShutdown() {
  struct sigaction stalled {};
  stalled.sa_handler = [](int) {
    constexpr char kMessage[] =
        "cfdb-worker: gRPC's shutdown stalled; exiting anyway\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    _exit(kExitRuntimeFailure);
  };
  sigaction(SIGALRM, &stalled, nullptr);
  alarm(static_cast<unsigned>((kCallsGrace + kShutdownStall).count()));
}

// ThreadCount returns how many threads this process has (0 when
// /proc/self/task cannot be read).
int ThreadCount() {
  std::error_code error;
  int threads = 0;
  for (std::filesystem::directory_iterator it("/proc/self/task", error), end;
       !error && it != end; it.increment(error)) {
    ++threads;
  }
  return threads;
}

// RegisterKinds registers the exec kind (unless the configuration turns it
// off), in the process's containment, then the embedding program's kinds;
// the latter's error, logged, is Serve's.
absl::Status RegisterKinds(
    Worker& worker, const PreparedServe& prepared, const Process& process,
    const std::function<absl::Status(Worker&)>& register_kinds) {
  if (prepared.config.exec_kind) {
    ExecOptions exec = prepared.exec;
    exec.containment = process.containment.get();
    exec.nofile = process.nofile;
    (void)worker.RegisterKind(kExecKind, ExecKind(exec));
  }
  if (!register_kinds) return absl::OkStatus();
  absl::Status s = register_kinds(worker);
  if (!s.ok()) spdlog::error("registering job kinds: {}", s.ToString());
  return s;
}

// RetirementHooks are the retirement policy's ways to the worker: the
// self-poll over the worker's own address (`host`:`port`, with the
// credentials a client uses) and the worker's stops.
RetirementPolicy::Hooks RetirementHooks(Worker& worker, const std::string& host,
                                        int port,
                                        const Credentials& credentials) {
  return {.connect = SelfPollFactory(host, port, credentials),
          .dial_fresh = FreshDial(host, port, credentials),
          .can_open_descriptor = &CanOpenDescriptor,
          .stop =
              [&worker](StopRequest request) {
                worker.RequestStop(std::move(request));
              },
          .stop_if_idle =
              [&worker](StopRequest request, Duration idle_for) {
                return worker.RequestStopIfIdle(std::move(request), idle_for);
              },
          .stop_state = [&worker] { return worker.stop_state(); }};
}

// ServeWorker runs a resolved configuration to the worker's retirement,
// with logging set up (Serve, in serve.h, says what it returns).
absl::Status ServeWorker(
    const PreparedServe& prepared,
    const std::function<absl::Status(Worker&)>& register_kinds) {
  const ServeConfig& config = prepared.config;
  const bool exec_kind = config.exec_kind;
  const TimePoint process_start = std::chrono::steady_clock::now();
  Process process;
  if (absl::Status s = PrepareProcess(prepared, process); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<CredentialMirror>> mirror =
      StartCredentialMirror(prepared);
  if (!mirror.ok()) {
    return Failure(absl::StatusCode::kFailedPrecondition,
                   mirror.status().ToString());
  }
  const Credentials credentials =
      *mirror != nullptr ? (*mirror)->credentials() : prepared.credentials;
  spdlog::info("{}", process.containment->Describe());
  // Declared before the worker, whose docket tells it of edges until the
  // worker is gone. It lives until Serve returns, so a retirement drain
  // (a busy docket) stays protected; then it is left to expire, not
  // released: a task whose process exits stops, protected or not
  // (docs/DEPLOY.md).
  std::unique_ptr<ScaleInProtection> protection =
      StartScaleInProtection(config.scale_in);
  std::unique_ptr<ScaleInProtection> deletion_cost =
      StartDeletionCost(config.deletion_cost);
  // `shutdown` is declared after the worker so its signal thread, which
  // calls the worker, is joined before the worker goes away.
  // Declared before the worker, which feeds it until it is gone.
  JobHistograms histograms;
  Worker worker(config.worker);
  worker.OnJobEnd([&histograms](const Worker::JobTiming& timing) {
    histograms.Observe(timing);
  });
  if (protection != nullptr || deletion_cost != nullptr) {
    worker.OnBusyEdge(
        [&worker, marks = std::array{protection.get(), deletion_cost.get()}] {
          for (ScaleInProtection* p : marks) {
            if (p == nullptr) continue;
            p->Changed([&worker] { return worker.docket().in_flight() > 0; });
          }
        });
  }
  Shutdown shutdown;
  absl::Status listening = shutdown.ListenForSignals(
      [&worker, grace = config.retirement.signal_grace](int signo, int count) {
        OnSignal(worker, grace, signo, count);
      });
  if (!listening.ok()) {
    return Failure(
        absl::StatusCode::kFailedPrecondition,
        absl::StrCat("cannot listen for signals: ", listening.ToString()));
  }
  process.containment->StartSweeping();
  const MemoryTrimmer trimmer;
  if (absl::Status s = RegisterKinds(worker, prepared, process, register_kinds);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(
      worker, ServerOptions{
                  .address = JoinHostPort(config.host, config.port),
                  .credentials = credentials,
                  .on_stop_rpc = [&] { shutdown.Stop(StopCause::kStopRpc); },
                  .admit = config.admit,
                  .unix_socket = config.unix_socket,
                  .wool_compat = config.wool_compat,
              });
  if (!server.ok()) {
    return Failure(absl::StatusCode::kFailedPrecondition,
                   std::string(server.status().message()));
  }
  const int port = (*server)->port();
  LogListening(config, credentials, port, exec_kind);

  RetirementPolicy policy(
      config.retirement, SteadyClock::Get(), shutdown.watcher(),
      RetirementHooks(worker, config.host, port, credentials));
  const AcceptFailureWatch accept_failures(policy, shutdown);
  std::unique_ptr<MetricsReporter> metrics =
      StartMetrics(config, worker, policy);
  // Ready from here (listening) until the drain begins (/readyz).
  LogThrottle http_log(SteadyClock::Get());
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> http =
      ServeObservers({.config = config,
                      .worker = worker,
                      .server = **server,
                      .policy = policy,
                      .protection = protection.get(),
                      .deletion_cost = deletion_cost.get(),
                      .histograms = histograms,
                      .started = process_start},
                     http_log);
  if (!http.ok()) {
    (*server)->Shutdown(kCallsGrace);
    return Failure(absl::StatusCode::kInvalidArgument,
                   std::string(http.status().message()));
  }
  const Retirement retirement = policy.Run(process_start);
  LogDrain(AwaitDrain(worker, policy, retirement,
                      config.retirement.max_lifetime_grace));
  if (metrics != nullptr) {
    metrics->Retire(
        ExitReasonName(retirement.reason),
        ToSeconds(std::chrono::steady_clock::now() - process_start));
  }
  BoundTheShutdown();
  (*server)->Shutdown(kCallsGrace);
  FlushLibraryLog();
  spdlog::info("stopped");
  // Not a clean retirement: the platform should know this task failed.
  if (retirement.reason == ExitReason::kListenerLost) {
    return absl::UnavailableError(
        "the worker could no longer accept connections (listener lost)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Serve(const ServeConfig& config,
                   const std::function<absl::Status(Worker&)>& register_kinds) {
  // Counted first: any thread found here was started before Serve.
  const int threads = ThreadCount();
  absl::StatusOr<PreparedServe> prepared = PrepareServe(config);
  if (!prepared.ok()) return prepared.status();
  (void)SetUpLogging(config.log_level, config.log_format);
  if (threads > 1) {
    spdlog::warn(
        "serving from a process with {} threads: a thread started before "
        "Serve may take a SIGTERM and end the process without a drain "
        "(serve.h)",
        threads);
  }
  return ServeWorker(*prepared, register_kinds);
}

int ServeExitCode(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status)) {
    return kExitUsage;
  }
  return kExitRuntimeFailure;
}

}  // namespace cfdb::worker

// The gRPC adapter: cfdb.worker.v1.Worker and grpc.health.v1.Health on the
// callback API, every call admitted first (admission.h). The calls live in
// dispatch_call.cc, stop_calls.cc and health.cc; this file builds the server
// with its limits. Nothing here blocks inside a reaction.
//
// Job kinds are not registered here: a Dispatch runs whatever kind its
// Worker has (Worker::RegisterKind, before WorkerServer::Start). `cfdb-worker
// serve` registers exec in src/serve/serve.cc (ServeWorker); a program that
// embeds the worker adds its own through Serve's `register_kinds`
// (include/cfdb/worker/serve.h) or on a Worker it serves itself.
#include "cfdb/worker/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "core/errno_text.h"
#include "grpcpp/resource_quota.h"
#include "rpc/admission.h"
#include "rpc/calls.h"
#include "rpc/dispatch_call.h"
#include "rpc/health.h"
#include "rpc/job_calls.h"
#include "rpc/rpc_counter.h"
#include "rpc/stop_calls.h"
#include "rpc/unix_socket.h"
#include "rpc/unknown_methods.h"
#include "rpc/wire.h"
#include "rpc/wool_service.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

using RawService = v1::Worker::WithRawCallbackMethod_Idle<
    v1::Worker::WithRawCallbackMethod_Stop<
        v1::Worker::WithRawCallbackMethod_Dispatch<
            v1::Worker::WithRawCallbackMethod_DispatchStream<
                v1::Worker::WithRawCallbackMethod_Attach<
                    v1::Worker::WithRawCallbackMethod_ListJobs<
                        v1::Worker::WithRawCallbackMethod_Cancel<
                            v1::Worker::WithRawCallbackMethod_Status<
                                v1::Worker::Service>>>>>>>>;

// Service implements cfdb.worker.v1.Worker over raw bytes (see calls.h for
// why), each call admitted before anything else happens.
class Service final : public RawService {
 public:
  Service(Worker& worker, Gate gate, std::function<void()> on_stop_rpc)
      : worker_(worker), gate_(gate), on_stop_rpc_(std::move(on_stop_rpc)) {
    // One callback for every Stop call, however many there are; it holds
    // `stops_` itself, as the worker may outlive this service.
    worker_.OnDrained([stops = stops_](const StopSummary& summary) {
      stops->Drained(summary);
    });
  }

  grpc::ServerUnaryReactor* Idle(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* reply) override {
    return Answer<v1::IdleRequest, v1::IdleTime>(
        ctx, *request, reply, Rpc::kIdle,
        [this](const v1::IdleRequest&, v1::IdleTime& idle) {
          idle.set_seconds(ToSeconds(worker_.Idle()));
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* reply) override {
    absl::StatusOr<v1::StopRequest> parsed =
        gate_.Open<v1::StopRequest>(*ctx, *request, Method(Rpc::kStop));
    if (parsed.ok() && std::isnan(parsed->grace_seconds())) {
      parsed = absl::InvalidArgumentError("grace_seconds: NaN");
    } else if (parsed.ok() && parsed->has_if_idle_for_seconds() &&
               !(parsed->if_idle_for_seconds() >= 0)) {
      parsed = absl::InvalidArgumentError(
          "if_idle_for_seconds: must be a number >= 0");
    }
    if (!parsed.ok()) {
      LogRefused(gate_.log, "Stop", "stop rpc", parsed.status());
      return FinishedUnary(ctx, wire::ToGrpc(parsed.status()));
    }
    std::optional<Duration> if_idle_for;
    if (parsed->has_if_idle_for_seconds()) {
      if_idle_for = ToDuration(Seconds(parsed->if_idle_for_seconds()));
    }
    return BeginStop(ctx, parsed->grace_seconds(), if_idle_for, reply,
                     &WriteStopReply);
  }

  // BeginStop requests the one drain with `grace` seconds (< 0: no limit)
  // for a Stop call of either service (this or wool's), answered with
  // `write` when the drain ends; with `if_idle_for`, only if the worker has
  // been idle that long (Worker::RequestStopIfIdle), else FAILED_PRECONDITION
  // at once.
  grpc::ServerUnaryReactor* BeginStop(grpc::CallbackServerContext* ctx,
                                      double grace,
                                      std::optional<Duration> if_idle_for,
                                      grpc::ByteBuffer* reply,
                                      StopReplyWriter write) {
    const StopRequest request{.source = "stop rpc",
                              .grace = GraceFromSeconds(grace)};
    if (if_idle_for) {
      if (absl::Status s = worker_.RequestStopIfIdle(request, *if_idle_for);
          !s.ok()) {
        gate_.log.Log(
            "Stop kept serving", spdlog::level::info,
            absl::StrCat("stop rpc: kept serving: ", std::string(s.message())));
        return FinishedUnary(ctx, wire::ToGrpc(s));
      }
    } else {
      worker_.RequestStop(request);
    }
    // A line per call would let 300 concurrent calls make 300 lines; the
    // drain's line counts them all ("stop rpc x300"). At debug, asked for,
    // every call has one.
    spdlog::debug("stop rpc: a call with grace {} s waits for the drain",
                  grace);
    gate_.log.Log(
        "Stop call", spdlog::level::info,
        absl::StrCat("stop rpc: draining with grace ", grace, " s",
                     if_idle_for ? absl::StrCat(" (idle for at least ",
                                                ToSeconds(*if_idle_for), " s)")
                                 : ""));
    auto* reactor = new StopReactor(calls_, stops_, reply, write);
    if (on_stop_rpc_) on_stop_rpc_();
    stops_->Add(reactor);
    return reactor;
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Dispatch(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override {
    absl::StatusOr<v1::DispatchRequest> parsed =
        gate_.Open<v1::DispatchRequest>(*ctx, *request, Method(Rpc::kDispatch));
    if (absl::IsPermissionDenied(parsed.status()) ||
        absl::IsCancelled(parsed.status())) {
      return FinishedWriter<grpc::ByteBuffer>(wire::ToGrpc(parsed.status()));
    }
    return StartDispatch(worker_, calls_, gate_.log, std::move(parsed),
                         gate_.admission.Caller(*ctx));
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* DispatchStream(
      grpc::CallbackServerContext* ctx) override {
    return StartDispatchStream(worker_, calls_, gate_, ctx);
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Attach(
      grpc::CallbackServerContext* ctx,
      const grpc::ByteBuffer* request) override {
    absl::StatusOr<v1::AttachRequest> parsed =
        gate_.Open<v1::AttachRequest>(*ctx, *request, Method(Rpc::kAttach));
    if (absl::IsPermissionDenied(parsed.status()) ||
        absl::IsCancelled(parsed.status())) {
      return FinishedWriter<grpc::ByteBuffer>(wire::ToGrpc(parsed.status()));
    }
    return StartAttach(worker_, calls_, std::move(parsed),
                       gate_.admission.Caller(*ctx));
  }

  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* reply) override {
    return Answer<v1::ListJobsRequest, v1::ListJobsReply>(
        ctx, *request, reply, Rpc::kListJobs,
        [this, ctx](const v1::ListJobsRequest& asked, v1::ListJobsReply& jobs) {
          return cfdb::worker::ListJobs(worker_, gate_.admission.Caller(*ctx),
                                        asked, jobs);
        });
  }

  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* reply) override {
    absl::StatusOr<v1::CancelRequest> parsed =
        gate_.Open<v1::CancelRequest>(*ctx, *request, Method(Rpc::kCancel));
    if (absl::IsPermissionDenied(parsed.status()) ||
        absl::IsCancelled(parsed.status())) {
      return FinishedUnary(ctx, wire::ToGrpc(parsed.status()));
    }
    return StartCancel(worker_, calls_, std::move(parsed),
                       gate_.admission.Caller(*ctx), reply);
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* reply) override {
    return Answer<v1::StatusRequest, v1::StatusReply>(
        ctx, *request, reply, Rpc::kStatus,
        [this, ctx](const v1::StatusRequest&, v1::StatusReply& status) {
          ServeStatus serve;
          {
            absl::MutexLock lock(&status_mu_);
            if (status_source_) serve = status_source_();
          }
          FillStatus(worker_, gate_.admission.Caller(*ctx), serve, status);
          return absl::OkStatus();
        });
  }

  void OnStatus(std::function<ServeStatus()> source) {
    absl::MutexLock lock(&status_mu_);
    status_source_ = std::move(source);
  }

  CallTracker& calls() { return calls_; }

 private:
  // Answer is every unary call answered at once: the gate (calls.h), then
  // `fill` writes the reply for the request, or says why not.
  template <typename Request, typename Reply, typename Fill>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer& request,
                                   grpc::ByteBuffer* reply, Rpc rpc,
                                   Fill fill) {
    absl::StatusOr<Request> parsed =
        gate_.Open<Request>(*ctx, request, Method(rpc));
    if (!parsed.ok()) return FinishedUnary(ctx, wire::ToGrpc(parsed.status()));
    Reply answer;
    const absl::Status filled = fill(*parsed, answer);
    if (filled.ok()) Serialize(answer, reply);
    return FinishedUnary(ctx, wire::ToGrpc(filled));
  }

  Worker& worker_;
  Gate gate_;
  const std::function<void()> on_stop_rpc_;
  CallTracker calls_;
  const std::shared_ptr<StopCalls> stops_ = std::make_shared<StopCalls>();
  absl::Mutex status_mu_;
  std::function<ServeStatus()> status_source_ ABSL_GUARDED_BY(status_mu_);
};

int Milliseconds(Duration d) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

// WhyNotListening says why `address` ("host:port", "[v6]:port") cannot be
// listened on, from the errno of binding it ourselves, since gRPC only says
// that it failed.
std::string WhyNotListening(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "not a host:port address";
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::StrCat("the host does not resolve (", gai_strerror(error),
                        ")");
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found,
                                                               freeaddrinfo);
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::StrCat("socket: ", ErrnoText(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as gRPC does
  const int bound = bind(fd, found->ai_addr, found->ai_addrlen);
  const int error = errno;
  close(fd);
  if (bound != 0) {
    return error == EADDRINUSE
               ? "the address is in use (another process listens on it)"
           : error == EADDRNOTAVAIL
               ? "not an address of this host (EADDRNOTAVAIL)"
               : absl::StrCat("bind: ", ErrnoText(error));
  }
  return "gRPC could not listen on it (see its error above)";
}

}  // namespace

class WorkerServer::Impl {
 public:
  Impl(Worker& worker, ServerOptions& options)
      : admission(std::move(options.admit), log),
        guard(log),
        service(worker, Gate{admission, guard, log},
                std::move(options.on_stop_rpc)),
        health_service(health, Gate{admission, guard, log}),
        wool_service(
            Gate{admission, guard, log},
            [&worker] { return ToSeconds(worker.Idle()); },
            [this](grpc::CallbackServerContext* ctx, double grace,
                   grpc::ByteBuffer* reply, StopReplyWriter write) {
              return service.BeginStop(ctx, grace, std::nullopt, reply, write);
            }),
        unknown_methods(options.wool_compat) {}
  // The lines any client can cause, throttled (core/log_throttle.h).
  LogThrottle log{SteadyClock::Get()};
  Admission admission;
  AbuseGuard guard;
  Service service;
  const std::shared_ptr<HealthState> health = std::make_shared<HealthState>();
  HealthService health_service;
  WoolService wool_service;
  UnknownMethods unknown_methods;
  RpcCounter counter;
  std::unique_ptr<grpc::Server> server;
  std::optional<UnixSocketFile> unix_socket;
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

// SetChannelArguments sets what every connection to the server gets: no
// shared port, the message sizes, keepalive and the limits (ServerLimits;
// the default stream limit is the docket's `max_concurrent_tasks` and the
// control streams).
void SetChannelArguments(grpc::ServerBuilder& builder,
                         const ServerOptions& options,
                         std::size_t max_concurrent_tasks) {
  // Without this, gRPC binds with SO_REUSEPORT and a second worker on the
  // same port would start and share the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.limits.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Keepalive (see kMinClientPingInterval and kKeepaliveTime in server.h).
  // Pings without data are unlimited: the server's own pings must go on for
  // as long as a silent job runs.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      Milliseconds(kMinClientPingInterval));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             Milliseconds(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Milliseconds(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // The limits (ServerLimits).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             Milliseconds(options.limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             Milliseconds(options.limits.max_connection_idle));
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONCURRENT_STREAMS,
      options.limits.max_concurrent_streams > 0
          ? options.limits.max_concurrent_streams
          : static_cast<int>(max_concurrent_tasks) + kControlStreams);
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    Worker& worker, ServerOptions options) {
  if (!options.admit.empty() &&
      options.credentials.kind != Credentials::Kind::kMutualTls) {
    return absl::InvalidArgumentError(
        "admission lists need mutual TLS: without a client certificate there "
        "is no identity to admit");
  }
  auto impl = std::make_unique<Impl>(worker, options);
  // Our own health service, not gRPC's built-in one.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.address,
                           wire::ServerCredentials(options.credentials), &port);
  int unix_port = 0;  // gRPC reports 1 once bound
  if (!options.unix_socket.empty()) {
    absl::StatusOr<UnixSocketFile> file =
        UnixSocketFile::Claim(options.unix_socket);
    if (!file.ok()) return file.status();
    impl->unix_socket.emplace(*std::move(file));
    builder.AddListeningPort(impl->unix_socket->bind_target(),
                             grpc::InsecureServerCredentials(), &unix_port);
  }
  builder.RegisterService(&impl->service);
  builder.RegisterService(&impl->health_service);
  if (options.wool_compat) builder.RegisterService(&impl->wool_service);
  builder.RegisterCallbackGenericService(&impl->unknown_methods);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(impl->counter.Factory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  SetChannelArguments(builder, options, worker.options().max_concurrent_tasks);
  grpc::ResourceQuota quota("cfdb-worker");
  quota.Resize(options.limits.memory_quota_bytes);
  builder.SetResourceQuota(quota);
  impl->server = builder.BuildAndStart();
  if (impl->server != nullptr && impl->unix_socket && unix_port == 0) {
    impl->server->Shutdown(std::chrono::system_clock::now());
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", options.unix_socket,
                     ": gRPC could not bind a socket in its directory"));
  }
  if (impl->server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.address,
        impl->unix_socket ? absl::StrCat(" and unix:", options.unix_socket)
                          : "",
        ": ", WhyNotListening(options.address)));
  }
  if (impl->unix_socket) {
    if (absl::Status s = impl->unix_socket->Publish(); !s.ok()) {
      impl->server->Shutdown(std::chrono::system_clock::now());
      return s;
    }
  }
  // From the moment a drain begins the worker takes no new work.
  worker.OnStopping([health = impl->health] { health->NotServing(); });
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl), port));
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

WorkerServer::~WorkerServer() { Shutdown(Duration::zero()); }

void WorkerServer::Shutdown(Duration wait) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  // gRPC's Shutdown(deadline) waits not only for calls but for every client
  // connection to close, so an idle pooled client would hold up the exit for
  // the whole deadline. Wait for our own calls instead, then shut down at
  // once, which cancels what is left and closes the connections.
  impl_->health->NotServing();
  impl_->service.calls().WaitDone(std::chrono::steady_clock::now() + wait);
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
  if (impl_->unix_socket) impl_->unix_socket->Remove();
  impl_->log.Flush();
}

void WorkerServer::NotServing() { impl_->health->NotServing(); }

void WorkerServer::OnStatus(std::function<ServeStatus()> source) {
  impl_->service.OnStatus(std::move(source));
}

RpcCounts WorkerServer::counts() const {
  RpcCounts counts;
  impl_->counter.Into(counts);
  for (std::size_t g = 0; g < kMethodGroupCount; ++g) {
    counts.admission_refusals[g] =
        impl_->admission.refused(static_cast<MethodGroup>(g));
  }
  return counts;
}

}  // namespace cfdb::worker

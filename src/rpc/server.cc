// The gRPC adapter: cfdb.worker.v1.Worker on the callback API. It translates
// proto <-> core and finishes each reactor exactly once; the Worker does the
// rest. Nothing here blocks inside a reaction.
#include "cfdb/worker/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <deque>
#include <optional>
#include <system_error>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "grpcpp/health_check_service_interface.h"
#include "rpc/wire.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// Output queued for one client beyond the message being written. Emit blocks
// past this, which stalls the job and bounds the worker's memory per job.
constexpr std::size_t kOutboxLimitBytes = std::size_t{256} * 1024;

class DispatchReactor;

// CallTracker counts the Dispatch and Stop calls not yet done, so shutdown
// can wait for exactly those (e.g. a Stop reply on its way out) and then
// close every connection at once instead of waiting for idle clients to
// hang up. Thread-safe.
class CallTracker {
 public:
  void Started() {
    absl::MutexLock lock(&mu_);
    ++calls_;
  }
  void Done() {
    {
      absl::MutexLock lock(&mu_);
      if (--calls_ > 0) return;
    }
    none_left_.SignalAll();
  }
  // WaitDone waits until no call is left or the monotonic clock reaches
  // `deadline`.
  void WaitDone(TimePoint deadline) {
    absl::MutexLock lock(&mu_);
    none_left_.AwaitUntil(
        mu_, deadline,
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ == 0; });
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar none_left_;
};

// LogRefusal logs a Dispatch refused before its job was tracked, the same
// way whatever refused it.
void LogRefusal(const std::string& job_id, const absl::Status& status) {
  LogEvent(spdlog::level::info,
           absl::StrCat("job ", job_id, ": refused: ", status.ToString()),
           {{"job_id", job_id},
            {"grpc_code", absl::StatusCodeToString(status.code())}});
}

// StreamJob is a job whose events go to one Dispatch stream. It outlives the
// reactor when the client goes first; `reactor_` is null from then on.
class StreamJob final : public Job {
 public:
  StreamJob(JobRequest request, Duration kill_grace, DispatchReactor* reactor)
      : Job(std::move(request), kill_grace), reactor_(reactor) {}

  void OnAccepted() override {
    v1::DispatchEvent accepted;
    accepted.mutable_accepted();
    Push(std::move(accepted));
  }

  EmitResult Emit(OutputStream stream, std::string_view data,
                  TimePoint deadline) override;

  void OnOutcome(const JobOutcome& outcome) override {
    Push(wire::OutcomeEvent(outcome), /*terminal=*/true);
  }

  // Called by the reactor.
  void WriteDone(bool ok);
  void ClientCancelled();
  void ReactorDone();

 protected:
  // A cancelled job's output is discarded (RunExec drops it too), so the
  // output still queued goes now: the job's terminal event is written next,
  // and a client that reads slowly still learns how its job ended.
  void OnCancelled() override {
    {
      absl::MutexLock lock(&mu_);
      std::erase_if(outbox_, [this](const v1::DispatchEvent& e)
                                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                   if (!e.has_output()) return false;
                                   outbox_bytes_ -= e.ByteSizeLong();
                                   return true;
                                 });
    }
    room_.SignalAll();
  }

 private:
  void Push(v1::DispatchEvent event, bool terminal = false);
  // Kick starts the next write or finishes the call; call without mu_.
  void Kick();

  absl::Mutex mu_;
  DispatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::DispatchEvent> outbox_ ABSL_GUARDED_BY(mu_);
  std::size_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  v1::DispatchEvent writing_event_;  // owned by the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool terminal_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // client gone / write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  CondVar room_;  // signalled when Emit may go on: room, broken or cancelled
};

class DispatchReactor final
    : public grpc::ServerWriteReactor<v1::DispatchEvent> {
 public:
  DispatchReactor(Worker& worker, CallTracker& calls,
                  const v1::DispatchRequest& request)
      : calls_(calls) {
    calls_.Started();
    absl::StatusOr<JobRequest> job_request = wire::FromProto(request);
    if (!job_request.ok()) {
      LogRefusal(request.job_id(), job_request.status());
      Finish(wire::ToGrpc(job_request.status()));
      return;
    }
    job_ = std::make_shared<StreamJob>(*std::move(job_request),
                                       worker.options().task_kill_grace, this);
    if (absl::Status s = worker.Dispatch(job_); !s.ok()) {
      LogRefusal(request.job_id(), s);
      job_.reset();
      Finish(wire::ToGrpc(s));
    }
  }

  void OnWriteDone(bool ok) override { job_->WriteDone(ok); }
  void OnCancel() override {
    if (job_) job_->ClientCancelled();
  }
  void OnDone() override {
    if (job_) job_->ReactorDone();
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
  std::shared_ptr<StreamJob> job_;
};

class StopReactor;

// StopCalls answers every Stop call when the worker's one drain ends. A call
// waiting for it holds no thread, only its entry in `waiting_`. Thread-safe.
class StopCalls {
 public:
  // Add answers `reactor` when the drain ends, or at once if it has.
  void Add(StopReactor* reactor);
  // Cancel finishes `reactor` with CANCELLED if it is still waiting (its
  // client's deadline passed, or the client went away).
  void Cancel(StopReactor* reactor);
  // Drained answers every waiting call with `summary`, and later ones at
  // once.
  void Drained(const StopSummary& summary);

 private:
  absl::Mutex mu_;
  std::optional<StopSummary> summary_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<StopReactor*> waiting_ ABSL_GUARDED_BY(mu_);
};

// StopReactor is one Stop call: answered with the drain's summary.
class StopReactor final : public grpc::ServerUnaryReactor {
 public:
  StopReactor(CallTracker& calls, std::shared_ptr<StopCalls> stops,
              v1::StopReply* reply)
      : calls_(calls), stops_(std::move(stops)), reply_(reply) {
    calls_.Started();
  }
  void Answer(const StopSummary& summary) {
    reply_->set_drained(static_cast<uint32_t>(summary.drained));
    reply_->set_cancelled(static_cast<uint32_t>(summary.cancelled));
    Finish(grpc::Status::OK);
  }
  void OnCancel() override { stops_->Cancel(this); }
  void OnDone() override {
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
  const std::shared_ptr<StopCalls> stops_;
  v1::StopReply* const reply_;
};

void StopCalls::Add(StopReactor* reactor) {
  std::optional<StopSummary> summary;
  {
    absl::MutexLock lock(&mu_);
    if (!summary_) {
      waiting_.insert(reactor);
      return;
    }
    summary = summary_;
  }
  reactor->Answer(*summary);
}

void StopCalls::Cancel(StopReactor* reactor) {
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.erase(reactor) == 0) return;
  }
  reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                               "the Stop call ended before the drain did"));
}

void StopCalls::Drained(const StopSummary& summary) {
  absl::flat_hash_set<StopReactor*> waiting;
  {
    absl::MutexLock lock(&mu_);
    summary_ = summary;
    waiting.swap(waiting_);
  }
  for (StopReactor* reactor : waiting) reactor->Answer(summary);
}

Job::EmitResult StreamJob::Emit(OutputStream stream, std::string_view data,
                                TimePoint deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (!room_.AwaitUntil(mu_, deadline,
                          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                            return outbox_bytes_ < kOutboxLimitBytes ||
                                   broken_ || cancelled();
                          })) {
      return EmitResult::kTimedOut;
    }
    if (broken_ || cancelled()) return EmitResult::kDropped;
  }
  Push(wire::OutputEvent(stream, data));
  return EmitResult::kSent;
}

void StreamJob::Push(v1::DispatchEvent event, bool terminal) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_) return;
    outbox_bytes_ += event.ByteSizeLong();
    outbox_.push_back(std::move(event));
    terminal_queued_ = terminal_queued_ || terminal;
  }
  Kick();
}

void StreamJob::Kick() {
  DispatchReactor* reactor = nullptr;
  grpc::Status finish;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_ || reactor_ == nullptr) return;
    if (!outbox_.empty() && !broken_) {
      writing_event_ = std::move(outbox_.front());
      outbox_.pop_front();
      outbox_bytes_ -= writing_event_.ByteSizeLong();
      writing_ = true;
      write = true;
      room_.SignalAll();
    } else if (broken_ || terminal_queued_) {
      // Everything up to the terminal event is written (or the client left).
      finished_ = true;
      finish = broken_ ? grpc::Status(grpc::StatusCode::CANCELLED,
                                      "the client went away; job cancelled")
                       : grpc::Status::OK;
    } else {
      return;
    }
    reactor = reactor_;
  }
  // Outside the lock: a reaction may run inline. `writing_` or `finished_`
  // keeps everyone else from touching the reactor meanwhile.
  if (write) {
    reactor->StartWrite(&writing_event_);
  } else {
    reactor->Finish(finish);
  }
}

void StreamJob::WriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) broken_ = true;
  }
  if (!ok) {
    room_.SignalAll();
    Cancel();
  }
  Kick();
}

void StreamJob::ClientCancelled() {
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }
  room_.SignalAll();
  Cancel();
  Kick();
}

void StreamJob::ReactorDone() {
  absl::MutexLock lock(&mu_);
  reactor_ = nullptr;
}

class Service final : public v1::Worker::CallbackService {
 public:
  Service(Worker& worker, std::function<void()> on_stop_rpc)
      : worker_(worker), on_stop_rpc_(std::move(on_stop_rpc)) {
    // One callback for every Stop call, however many there are; it holds
    // `stops_` itself, as the worker may outlive this service.
    worker_.OnDrained([stops = stops_](const StopSummary& summary) {
      stops->Drained(summary);
    });
  }

  grpc::ServerUnaryReactor* Idle(grpc::CallbackServerContext* ctx,
                                 const v1::IdleRequest*,
                                 v1::IdleTime* reply) override {
    reply->set_seconds(ToSeconds(worker_.Idle()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext*,
                                 const v1::StopRequest* request,
                                 v1::StopReply* reply) override {
    auto* reactor = new StopReactor(calls_, stops_, reply);
    const double grace = request->grace_seconds();
    if (std::isnan(grace)) {
      const absl::Status refused =
          absl::InvalidArgumentError("grace_seconds: NaN");
      spdlog::info("stop rpc: refused: {}", refused.ToString());
      reactor->Finish(wire::ToGrpc(refused));
      return reactor;
    }
    spdlog::info("stop rpc: draining with grace {} s", grace);
    worker_.RequestStop(
        {.source = "stop rpc",
         .grace = grace < 0 ? Duration(-1) : ToDuration(Seconds(grace))});
    if (on_stop_rpc_) on_stop_rpc_();
    stops_->Add(reactor);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::DispatchEvent>* Dispatch(
      grpc::CallbackServerContext*,
      const v1::DispatchRequest* request) override {
    return new DispatchReactor(worker_, calls_, *request);
  }

  CallTracker& calls() { return calls_; }

 private:
  Worker& worker_;
  const std::function<void()> on_stop_rpc_;
  CallTracker calls_;
  const std::shared_ptr<StopCalls> stops_ = std::make_shared<StopCalls>();
};

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

// Health marks the health service NOT_SERVING; shared with the worker's
// stopping callback, which may outlive the server.
class Health {
 public:
  void Set(grpc::HealthCheckServiceInterface* service) {
    absl::MutexLock lock(&mu_);
    service_ = service;
    if (service_ != nullptr) service_->SetServingStatus(true);
  }
  void NotServing() {
    absl::MutexLock lock(&mu_);
    if (service_ != nullptr) service_->SetServingStatus(false);
  }

 private:
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* service_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class WorkerServer::Impl {
 public:
  Impl(Worker& worker, std::function<void()> on_stop_rpc)
      : service(worker, std::move(on_stop_rpc)) {}
  Service service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<Health> health = std::make_shared<Health>();
  absl::Mutex mu;
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    Worker& worker, ServerOptions options) {
  auto impl = std::make_unique<Impl>(worker, std::move(options.on_stop_rpc));
  // gRPC's own grpc.health.v1.Health service; it must be enabled before the
  // builder exists.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.address,
                           wire::ServerCredentials(options.credentials), &port);
  builder.RegisterService(&impl->service);
  // Without this, gRPC binds with SO_REUSEPORT and a second worker on the
  // same port would start and share the traffic instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(wire::kMaxMessageBytes);
  // Keepalive (see kMinClientPingInterval and kKeepaliveTime in server.h).
  // Pings without data are unlimited: the server's own pings must go on for
  // as long as a silent job runs.
  auto ms = [](Duration d) {
    return static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      ms(kMinClientPingInterval));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             ms(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             ms(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.address, ": ",
                     WhyNotListening(options.address)));
  }
  impl->health->Set(impl->server->GetHealthCheckService());
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
  impl_->health->Set(nullptr);
}

}  // namespace cfdb::worker

// The gRPC adapter: cfdb.worker.v1.Worker on the callback API. It translates
// proto <-> core and finishes each reactor exactly once; the Worker does the
// rest. Nothing here blocks inside a reaction.
#include "cfdb/worker/server.h"

#include <cmath>
#include <deque>
#include <list>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include "wire.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// Output queued for one client beyond the message being written. Emit blocks
// past this, which stalls the job and bounds the worker's memory per job.
constexpr std::size_t kOutboxLimitBytes = 256 * 1024;

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
    absl::MutexLock lock(&mu_);
    --calls_;
  }
  // WaitDone waits until no call is left or `deadline` passes.
  void WaitDone(TimePoint deadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return calls_ == 0;
    };
    const Duration left = deadline - std::chrono::steady_clock::now();
    if (left > Duration::zero()) {
      mu_.AwaitWithTimeout(absl::Condition(&done), absl::FromChrono(left));
    }
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

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
  void OnCancelled() override {
    absl::MutexLock lock(&mu_);  // wakes Emit's Await
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
};

class DispatchReactor final : public grpc::ServerWriteReactor<v1::DispatchEvent> {
 public:
  DispatchReactor(Worker& worker, CallTracker& calls,
                  const v1::DispatchRequest& request)
      : calls_(calls) {
    calls_.Started();
    absl::StatusOr<JobRequest> job_request = wire::FromProto(request);
    if (!job_request.ok()) {
      Finish(wire::ToGrpc(job_request.status()));
      return;
    }
    job_ = std::make_shared<StreamJob>(*std::move(job_request),
                                       worker.options().task_kill_grace, this);
    if (absl::Status s = worker.Dispatch(job_); !s.ok()) {
      spdlog::info("job {}: refused: {}", request.job_id(), s.ToString());
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

// StopReactor finishes a Stop call once its drain is over.
class StopReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit StopReactor(CallTracker& calls) : calls_(calls) { calls_.Started(); }
  void OnDone() override {
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
};

Job::EmitResult StreamJob::Emit(OutputStream stream, std::string_view data,
                                TimePoint deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return outbox_bytes_ < kOutboxLimitBytes || broken_ || cancelled();
    };
    while (!ready()) {
      const TimePoint now = std::chrono::steady_clock::now();
      if (now >= deadline) return EmitResult::kTimedOut;
      const Duration left = deadline - now;
      mu_.AwaitWithTimeout(absl::Condition(&ready),
                           left > std::chrono::hours(1)
                               ? absl::Hours(1)
                               : absl::FromChrono(left));
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
  if (!ok) Cancel();
  Kick();
}

void StreamJob::ClientCancelled() {
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }
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
      : worker_(worker), on_stop_rpc_(std::move(on_stop_rpc)) {}

  ~Service() override { JoinDrains(); }

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
    auto* reactor = new StopReactor(calls_);
    const double grace = request->grace_seconds();
    if (std::isnan(grace)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "grace_seconds: NaN"));
      return reactor;
    }
    spdlog::info("stop rpc: draining with grace {} s", grace);
    if (on_stop_rpc_) on_stop_rpc_();
    // The drain blocks, so it runs on a thread of its own.
    absl::MutexLock lock(&mu_);
    drains_.emplace_back([this, grace, reply, reactor] {
      const StopSummary summary =
          worker_.Stop(grace < 0 ? Duration(-1) : ToDuration(Seconds(grace)));
      reply->set_drained(static_cast<uint32_t>(summary.drained));
      reply->set_cancelled(static_cast<uint32_t>(summary.cancelled));
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  grpc::ServerWriteReactor<v1::DispatchEvent>* Dispatch(
      grpc::CallbackServerContext*,
      const v1::DispatchRequest* request) override {
    return new DispatchReactor(worker_, calls_, *request);
  }

  CallTracker& calls() { return calls_; }

  void JoinDrains() {
    std::list<std::thread> drains;
    {
      absl::MutexLock lock(&mu_);
      drains.swap(drains_);
    }
    for (std::thread& t : drains) t.join();
  }

 private:
  Worker& worker_;
  const std::function<void()> on_stop_rpc_;
  CallTracker calls_;
  absl::Mutex mu_;
  std::list<std::thread> drains_ ABSL_GUARDED_BY(mu_);
};

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
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.address,
        " (address in use, or not an address of this host)"));
  }
  impl->health->Set(impl->server->GetHealthCheckService());
  if (worker.stopping()) impl->health->NotServing();
  // From the moment a drain begins the worker takes no new work.
  worker.OnStopping([health = impl->health] { health->NotServing(); });
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl), port));
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

WorkerServer::~WorkerServer() { Shutdown(Duration::zero()); }

void WorkerServer::Shutdown(Duration deadline) {
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
  impl_->service.calls().WaitDone(std::chrono::steady_clock::now() + deadline);
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->service.JoinDrains();
  impl_->server->Wait();
  impl_->health->Set(nullptr);
}

}  // namespace cfdb::worker

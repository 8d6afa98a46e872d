#include "rpc/health.h"

#include <string>
#include <vector>

#include "rpc/calls.h"
#include "rpc/wire.h"

namespace cfdb::worker {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// HealthWatch is one Watch call: it writes the status for its service
// whenever it changes, one write at a time, until the client goes.
class HealthWatch final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  HealthWatch(std::shared_ptr<HealthState> state, std::string service)
      : state_(std::move(state)), service_(std::move(service)) {
    Changed(state_->Add(this));
  }

  // Changed writes the status now, or once the write in flight is done.
  // Serving only ever ends, so a late `true` cannot undo a `false`.
  void Changed(bool serving) {
    {
      absl::MutexLock lock(&mu_);
      serving_ = serving_ && serving;
      again_ = true;
    }
    Kick();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) done_ = true;
    }
    Kick();
  }
  // The client went (or the server shuts down): no write may start, and
  // the call finishes once none is in flight.
  void OnCancel() override {
    state_->Remove(this);
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    Kick();
  }
  void OnDone() override { delete this; }

 private:
  // Kick starts the next write or finishes the call, outside the lock (a
  // reaction may run inline); `writing_` and `finished_` keep it to one
  // operation at a time.
  void Kick() {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (done_) {
        finished_ = finish = true;
      } else {
        const HealthCheckResponse::ServingStatus status =
            !service_.empty() && service_ != kWorkerServiceName
                ? HealthCheckResponse::SERVICE_UNKNOWN
            : serving_ ? HealthCheckResponse::SERVING
                       : HealthCheckResponse::NOT_SERVING;
        if (!again_ || status == last_) return;
        again_ = false;
        last_ = status;
        HealthCheckResponse response;
        response.set_status(status);
        Serialize(response, &response_);
        writing_ = true;
      }
    }
    if (finish) {
      Finish(grpc::Status::CANCELLED);
    } else {
      StartWrite(&response_);
    }
  }

  const std::shared_ptr<HealthState> state_;
  const std::string service_;
  absl::Mutex mu_;
  grpc::ByteBuffer response_;
  HealthCheckResponse::ServingStatus last_ ABSL_GUARDED_BY(mu_) =
      HealthCheckResponse::UNKNOWN;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool again_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
};

HealthCheckResponse::ServingStatus HealthState::Status(
    std::string_view service) const {
  if (!service.empty() && service != kWorkerServiceName) {
    return HealthCheckResponse::SERVICE_UNKNOWN;
  }
  absl::MutexLock lock(&mu_);
  return serving_ ? HealthCheckResponse::SERVING
                  : HealthCheckResponse::NOT_SERVING;
}

void HealthState::NotServing() {
  absl::MutexLock lock(&mu_);
  if (!serving_) return;
  serving_ = false;
  // Under the lock, so no watch is removed (and deleted) meanwhile.
  for (HealthWatch* watch : watches_) watch->Changed(false);
}

bool HealthState::Add(HealthWatch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.insert(watch);
  return serving_;
}

void HealthState::Remove(HealthWatch* watch) {
  absl::MutexLock lock(&mu_);
  watches_.erase(watch);
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<HealthCheckRequest> parsed =
      gate_.Open<HealthCheckRequest>(*context, *request, method::kHealthCheck);
  if (!parsed.ok()) {
    reactor->Finish(wire::ToGrpc(parsed.status()));
    return reactor;
  }
  const HealthCheckResponse::ServingStatus status =
      state_->Status(parsed->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service"));
    return reactor;
  }
  HealthCheckResponse response;
  response.set_status(status);
  Serialize(response, reply);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* HealthService::Watch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::StatusOr<HealthCheckRequest> parsed =
      gate_.Open<HealthCheckRequest>(*context, *request, method::kHealthWatch);
  if (!parsed.ok()) {
    return FinishedWriter<grpc::ByteBuffer>(wire::ToGrpc(parsed.status()));
  }
  return new HealthWatch(state_, parsed->service());
}

}  // namespace cfdb::worker

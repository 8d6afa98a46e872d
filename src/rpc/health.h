// The worker's health service: gRPC's health protocol (grpc.health.v1.Health,
// gRPC's doc/health-checking.md), served by the worker itself so that its
// calls pass the same admission as every other.
#pragma once

#include <memory>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rpc/calls.h"

namespace cfdb::worker {

// kWorkerServiceName is the service Check and Watch answer for besides the
// whole server (the empty name).
inline constexpr char kWorkerServiceName[] = "cfdb.worker.v1.Worker";

class HealthWatch;

// HealthState is SERVING until NotServing(), NOT_SERVING after, for "" and
// kWorkerServiceName; shared by the service and the worker's stopping
// callback, which may outlive the server. Thread-safe.
class HealthState {
 public:
  // Status returns the status for `service`, or SERVICE_UNKNOWN.
  grpc::health::v1::HealthCheckResponse::ServingStatus Status(
      std::string_view service) const;
  // NotServing turns every service NOT_SERVING and tells every watch.
  // Idempotent.
  void NotServing();
  // Add tells `watch` of every change from now on; returns whether the
  // worker serves now.
  bool Add(HealthWatch* watch);
  void Remove(HealthWatch* watch);

 private:
  mutable absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
  absl::flat_hash_set<HealthWatch*> watches_ ABSL_GUARDED_BY(mu_);
};

using RawHealthService = grpc::health::v1::Health::WithRawCallbackMethod_Check<
    grpc::health::v1::Health::WithRawCallbackMethod_Watch<
        grpc::health::v1::Health::Service>>;

// HealthService serves Check (NOT_FOUND for an unknown service, as the
// protocol says) and Watch (the status at once, then each change; an
// unknown service is SERVICE_UNKNOWN and the stream stays open). Both are
// observe methods for admission, and raw like the worker's (calls.h).
class HealthService final : public RawHealthService {
 public:
  HealthService(std::shared_ptr<HealthState> state, Gate gate)
      : state_(std::move(state)), gate_(gate) {}

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* reply) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

 private:
  const std::shared_ptr<HealthState> state_;
  Gate gate_;
};

}  // namespace cfdb::worker

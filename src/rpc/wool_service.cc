#include "rpc/wool_service.h"

#include <cmath>

#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

// Wool's stop answers Void, whatever the drain did.
void WriteVoid(const StopSummary&, grpc::ByteBuffer* reply) {
  Serialize(wool_wire::Void(), reply);
}

}  // namespace

grpc::ServerUnaryReactor* WoolService::idle(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* reply) {
  const absl::Status s =
      gate_.Open<wool_wire::Void>(*ctx, *request, method::kWoolIdle).status();
  if (!s.ok()) return FinishedUnary(ctx, wire::ToGrpc(s));
  wool_wire::IdleTime idle;
  idle.set_seconds(idle_());
  Serialize(idle, reply);
  return FinishedUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WoolService::stop(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* reply) {
  absl::StatusOr<wool_wire::StopRequest> parsed =
      gate_.Open<wool_wire::StopRequest>(*ctx, *request, method::kWoolStop);
  if (parsed.ok() && std::isnan(parsed->timeout())) {
    parsed = absl::InvalidArgumentError("timeout: NaN");
    LogRefused(gate_.log, "wool stop", "wool stop", parsed.status());
  }
  if (!parsed.ok()) return FinishedUnary(ctx, wire::ToGrpc(parsed.status()));
  return stop_(ctx, parsed->timeout(), reply, &WriteVoid);
}

}  // namespace cfdb::worker

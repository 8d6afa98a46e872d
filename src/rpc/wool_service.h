// wool.runtime.protobuf.wire.Worker's `idle` and `stop`
// (proto/wool/runtime/protobuf/wire/worker.proto), for the fleet tooling
// of the Python worker library Wool: the same docket, the same drain and
// the same admission as cfdb.worker.v1.Worker's Idle and Stop.
#pragma once

#include <functional>

#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"
#include "rpc/stop_calls.h"
#include "wool/runtime/protobuf/wire/worker.grpc.pb.h"

namespace cfdb::worker {

namespace wool_wire = ::wool::runtime::protobuf::wire;

// WoolService serves Wool's idle and stop over raw bytes, each call through
// the Gate first (admission: idle observes, stop controls). Thread-safe.
class WoolService final : public wool_wire::Worker::WithRawCallbackMethod_idle<
                              wool_wire::Worker::WithRawCallbackMethod_stop<
                                  wool_wire::Worker::Service>> {
 public:
  // The idle seconds of the worker.
  using IdleSeconds = std::function<double()>;
  // Begins a stop with a grace in seconds (< 0: no limit), answered with
  // the writer's reply when the drain ends.
  using BeginStop = std::function<grpc::ServerUnaryReactor*(
      grpc::CallbackServerContext* ctx, double grace, grpc::ByteBuffer* reply,
      StopReplyWriter write)>;

  WoolService(Gate gate, IdleSeconds idle, BeginStop stop)
      : gate_(gate), idle_(std::move(idle)), stop_(std::move(stop)) {}

  grpc::ServerUnaryReactor* idle(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* reply) override;
  // `timeout` is the drain grace, as the Python library's
  // WorkerConnection.stop(grace) sends it: 0 cancels now, > 0 drains up to
  // that long, < 0 without limit; NaN is INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* stop(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* reply) override;

 private:
  Gate gate_;
  const IdleSeconds idle_;
  const BeginStop stop_;
};

}  // namespace cfdb::worker

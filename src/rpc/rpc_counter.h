// RpcCounter: every call the server answers, counted by RPC and status
// code, through a gRPC server interceptor (grpcpp's experimental
// ServerInterceptorFactoryInterface, hook PRE_SEND_STATUS), so that no
// handler has to remember to count. The methods are the registry's
// (rpcs.h); a method the worker does not serve counts as one row, so a
// client inventing names cannot grow the set.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "cfdb/worker/rpcs.h"
#include "cfdb/worker/server.h"
#include "grpcpp/support/server_interceptor.h"

namespace cfdb::worker {

// RpcRowOf is the row of RpcCounts::calls that a call of `path` (gRPC's
// "/package.Service/Method") counts in.
std::size_t RpcRowOf(std::string_view path);

// RpcCounter is thread-safe.
class RpcCounter {
 public:
  void Count(std::size_t row, int code);
  // Into fills `counts.calls`.
  void Into(RpcCounts& counts) const;

  // Factory returns an interceptor factory that counts into this, which
  // must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  Factory();

 private:
  std::array<std::array<std::atomic<uint64_t>, RpcCounts::kCodes>,
             std::size(kRpcs) + 1>
      calls_{};
};

}  // namespace cfdb::worker

#include "rpc/rpc_counter.h"

#include <algorithm>

namespace cfdb::worker {
namespace {

constexpr std::string_view kWorkerService = "/cfdb.worker.v1.Worker/";
constexpr std::string_view kHealthService = "/grpc.health.v1.Health/";
constexpr std::string_view kWoolService = "/wool.runtime.protobuf.wire.Worker/";

constexpr std::size_t RowOf(Rpc rpc) { return static_cast<std::size_t>(rpc); }

// Counting is one interceptor per call: at the status, one increment.
class Counting final : public grpc::experimental::Interceptor {
 public:
  Counting(RpcCounter& counter, std::size_t row)
      : counter_(counter), row_(row) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      counter_.Count(row_, methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  RpcCounter& counter_;
  const std::size_t row_;
};

class CountingFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(RpcCounter& counter) : counter_(counter) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Counting(counter_, RpcRowOf(info->method()));
  }

 private:
  RpcCounter& counter_;
};

}  // namespace

std::size_t RpcRowOf(std::string_view path) {
  constexpr std::size_t kNotServed = std::size(kRpcs);
  if (path.starts_with(kHealthService)) return RowOf(Rpc::kHealth);
  if (path.starts_with(kWoolService)) {
    path.remove_prefix(kWoolService.size());
    return path == "idle"   ? RowOf(Rpc::kIdle)
           : path == "stop" ? RowOf(Rpc::kStop)
                            : kNotServed;
  }
  if (!path.starts_with(kWorkerService)) return kNotServed;
  path.remove_prefix(kWorkerService.size());
  for (const RpcInfo& info : kRpcs) {
    if (info.rpc == Rpc::kHealth) continue;
    if (std::find(info.methods.begin(), info.methods.end(), path) !=
        info.methods.end()) {
      return RowOf(info.rpc);
    }
  }
  return kNotServed;
}

void RpcCounter::Count(std::size_t row, int code) {
  const auto c = static_cast<std::size_t>(code);
  if (row < calls_.size() && c < RpcCounts::kCodes) ++calls_[row][c];
}

void RpcCounter::Into(RpcCounts& counts) const {
  for (std::size_t row = 0; row < calls_.size(); ++row) {
    for (std::size_t c = 0; c < RpcCounts::kCodes; ++c) {
      counts.calls[row][c] = calls_[row][c].load();
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcCounter::Factory() {
  return std::make_unique<CountingFactory>(*this);
}

}  // namespace cfdb::worker

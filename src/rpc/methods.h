// The methods the worker serves, as the gate (admission) and the logs name
// them: each is an RPC of the registry (cfdb/worker/rpcs.h) under one of its
// names, with the RPC's group. A handler opens its calls with its Method
// (Gate::Open); a new RPC needs nothing here.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "cfdb/worker/rpcs.h"

namespace cfdb::worker {

// Method is one method: its RPC and the name logs and refusals say it by.
struct Method {
  Rpc rpc = Rpc::kIdle;
  std::string_view name;

  constexpr Method() = default;
  // The RPC under its first name (the proto's).
  constexpr explicit Method(Rpc r) : rpc(r), name(InfoOf(r).methods[0]) {}
  // The RPC under its `index`th name (rpcs.h: RpcInfo::methods).
  constexpr Method(Rpc r, std::size_t index)
      : rpc(r), name(InfoOf(r).methods[index]) {}

  constexpr MethodGroup group() const { return InfoOf(rpc).group; }
  constexpr bool operator==(const Method& other) const {
    return rpc == other.rpc && name == other.name;
  }
};

namespace method {

// The methods served under a second name: by DispatchStream (with stdin),
// by Health's two methods, and by wool.runtime.protobuf.wire.Worker
// (--wool-compat).
inline constexpr Method kDispatchStream{Rpc::kDispatch, 1};
inline constexpr Method kHealthCheck{Rpc::kHealth, 0};
inline constexpr Method kHealthWatch{Rpc::kHealth, 1};
inline constexpr Method kWoolIdle{Rpc::kIdle, 1};
inline constexpr Method kWoolStop{Rpc::kStop, 1};

namespace internal {
constexpr std::size_t CountMethods() {
  std::size_t n = 0;
  for (const RpcInfo& info : kRpcs) n += info.methods.size();
  return n;
}
}  // namespace internal

// kAll lists every method of every RPC, in the registry's order.
inline constexpr auto kAll = [] {
  std::array<Method, internal::CountMethods()> all{};
  std::size_t n = 0;
  for (const RpcInfo& info : kRpcs) {
    for (std::size_t i = 0; i < info.methods.size(); ++i) {
      all[n++] = Method(info.rpc, i);
    }
  }
  return all;
}();

}  // namespace method
}  // namespace cfdb::worker

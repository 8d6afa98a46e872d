// The methods the worker serves, each with its group: the one table that
// the gate (admission), the tests and the docs read. A new method is a new
// row here and a handler that opens its calls with it (Gate::Open).
#pragma once

#include <string_view>

#include "cfdb/worker/errors.h"
#include "rpc/admission.h"

namespace cfdb::worker {

// Method is one method: its name as logs and refusals say it, what it does
// (control: changes what runs; observe: only reads), and the Rpc its
// failures classify as (cfdb/worker/errors.h).
struct Method {
  std::string_view name;
  MethodGroup group;
  Rpc rpc;
};

namespace method {

// cfdb.worker.v1.Worker.
inline constexpr Method kIdle{"Idle", MethodGroup::kObserve, Rpc::kIdle};
inline constexpr Method kStop{"Stop", MethodGroup::kControl, Rpc::kStop};
inline constexpr Method kDispatch{"Dispatch", MethodGroup::kControl,
                                  Rpc::kDispatch};
inline constexpr Method kDispatchStream{"DispatchStream", MethodGroup::kControl,
                                        Rpc::kDispatch};
inline constexpr Method kAttach{"Attach", MethodGroup::kControl, Rpc::kAttach};
inline constexpr Method kListJobs{"ListJobs", MethodGroup::kObserve,
                                  Rpc::kListJobs};
inline constexpr Method kCancel{"Cancel", MethodGroup::kControl, Rpc::kCancel};
// grpc.health.v1.Health.
inline constexpr Method kHealthCheck{"Health/Check", MethodGroup::kObserve,
                                     Rpc::kHealth};
inline constexpr Method kHealthWatch{"Health/Watch", MethodGroup::kObserve,
                                     Rpc::kHealth};
// wool.runtime.protobuf.wire.Worker (--wool-compat).
inline constexpr Method kWoolIdle{"wool idle", MethodGroup::kObserve,
                                  Rpc::kIdle};
inline constexpr Method kWoolStop{"wool stop", MethodGroup::kControl,
                                  Rpc::kStop};

// kAll lists every method above.
inline constexpr const Method* kAll[] = {
    &kIdle,        &kStop,     &kDispatch, &kDispatchStream,
    &kAttach,      &kListJobs, &kCancel,   &kHealthCheck,
    &kHealthWatch, &kWoolIdle, &kWoolStop};

}  // namespace method
}  // namespace cfdb::worker

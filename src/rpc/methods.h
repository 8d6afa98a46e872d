// The methods the worker serves, each with its group: the one table that
// the gate (admission), the tests and the docs read. A new method is a new
// row here and a handler that opens its calls with it (Gate::Open).
#pragma once

#include <string_view>

#include "rpc/admission.h"

namespace cfdb::worker {

// Method is one method: its name as logs and refusals say it, and what it
// does (control: changes what runs; observe: only reads).
struct Method {
  std::string_view name;
  MethodGroup group;
};

namespace method {

// cfdb.worker.v1.Worker.
inline constexpr Method kIdle{"Idle", MethodGroup::kObserve};
inline constexpr Method kStop{"Stop", MethodGroup::kControl};
inline constexpr Method kDispatch{"Dispatch", MethodGroup::kControl};
inline constexpr Method kDispatchStream{"DispatchStream",
                                        MethodGroup::kControl};
inline constexpr Method kAttach{"Attach", MethodGroup::kControl};
inline constexpr Method kListJobs{"ListJobs", MethodGroup::kObserve};
inline constexpr Method kCancel{"Cancel", MethodGroup::kControl};
// grpc.health.v1.Health.
inline constexpr Method kHealthCheck{"Health/Check", MethodGroup::kObserve};
inline constexpr Method kHealthWatch{"Health/Watch", MethodGroup::kObserve};
// wool.runtime.protobuf.wire.Worker (--wool-compat).
inline constexpr Method kWoolIdle{"wool idle", MethodGroup::kObserve};
inline constexpr Method kWoolStop{"wool stop", MethodGroup::kControl};

// kAll lists every method above.
inline constexpr const Method* kAll[] = {
    &kIdle,        &kStop,     &kDispatch, &kDispatchStream,
    &kAttach,      &kListJobs, &kCancel,   &kHealthCheck,
    &kHealthWatch, &kWoolIdle, &kWoolStop};

}  // namespace method
}  // namespace cfdb::worker

// The calls that carry a job's events: Dispatch, DispatchStream (with the
// job's stdin from the same stream) and Attach.
#pragma once

#include <string>

#include "cfdb/worker/v1/worker.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"

namespace cfdb::worker {

// StartDispatch hands the job of `request` to `worker` and returns the
// call's reactor; a request refused (unparseable, invalid, a duplicate id,
// docket full, stopping) finishes at once with its status and no event,
// logged as a refusal through `log` (one line per status code per period,
// with a count). `log` must outlive the call; `caller` is the caller's
// (Admission::Caller): the job is its, and attach_if_exists follows only
// a job it owns.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDispatch(
    Worker& worker, CallTracker& calls, LogThrottle& log,
    absl::StatusOr<v1::DispatchRequest> request, const JobCaller& caller);

// StartDispatchStream returns the reactor of a DispatchStream call: its
// first message passes `gate` and is handed to `worker` as StartDispatch's
// request is; then the job's stdin is read from the stream with flow control
// (worker.proto).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
StartDispatchStream(Worker& worker, CallTracker& calls, Gate gate,
                    grpc::CallbackServerContext* context);

// StartAttach returns the reactor of an Attach call: NOT_FOUND for an
// unknown job, PERMISSION_DENIED for one `caller` does not own, else the
// job's events from the offsets asked for (as a follower, or its new
// controller with take_over).
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartAttach(
    Worker& worker, CallTracker& calls,
    absl::StatusOr<v1::AttachRequest> request, const JobCaller& caller);

}  // namespace cfdb::worker

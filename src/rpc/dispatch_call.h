// Dispatch and DispatchStream calls: a job's events, in order, on one
// stream; for DispatchStream, its stdin from the same stream.
#pragma once

#include "cfdb/worker/v1/worker.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"

namespace cfdb::worker {

// StartDispatch hands the job of `request` to `worker` and returns the
// call's reactor; a request refused (unparseable, invalid, docket full,
// stopping) finishes at once with its status and no event, logged as a
// refusal (at most one line per status code per 10 s, with a count).
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDispatch(
    Worker& worker, CallTracker& calls,
    absl::StatusOr<v1::DispatchRequest> request);

// StartDispatchStream returns the reactor of a DispatchStream call: its
// first message passes `gate` and is handed to `worker` as StartDispatch's
// request is; then the job's stdin is read from the stream with flow control
// (worker.proto).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
StartDispatchStream(Worker& worker, CallTracker& calls, Gate gate,
                    grpc::CallbackServerContext* context);

}  // namespace cfdb::worker

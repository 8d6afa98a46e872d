// The unary calls on one job or on the list of jobs: ListJobs and Cancel.
#pragma once

#include "cfdb/worker/v1/worker.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"

namespace cfdb::worker {

// FillJobInfo writes what `job` is at `now` (a monotonic reading) into
// `info`, without argv past argv[0] or the environment.
void FillJobInfo(const Job& job, TimePoint now, v1::JobInfo& info);

// ListJobs writes the reply of a ListJobs call: every job `worker` runs or
// retains (JobInfo), without argv past argv[0] or the environment.
void ListJobs(Worker& worker, v1::ListJobsReply& reply);

// StartCancel cancels the job of `request` and returns the call's reactor,
// which answers with the job's outcome once it has ended (holding no thread
// meanwhile): NOT_FOUND for an unknown job, INVALID_ARGUMENT for a grace
// that is NaN or negative, CANCELLED when the client leaves first (the job
// is cancelled all the same).
grpc::ServerUnaryReactor* StartCancel(Worker& worker, CallTracker& calls,
                                      absl::StatusOr<v1::CancelRequest> request,
                                      grpc::ByteBuffer* reply);

}  // namespace cfdb::worker

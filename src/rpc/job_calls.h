// The unary calls on one job or on the list of jobs: ListJobs, Cancel, and
// Status (the worker and its jobs in flight).
#pragma once

#include "cfdb/worker/server.h"
#include "cfdb/worker/v1/worker.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"

namespace cfdb::worker {

// FillJobInfo writes what `job` is at `now` (a monotonic reading) into
// `info`, without argv past argv[0] or the environment.
void FillJobInfo(const Job& job, TimePoint now, v1::JobInfo& info);

// The page size of a ListJobs call that names none, and the largest one:
// 1000 JobInfo of every field at its cap (worker.proto) stay under 3 MiB.
inline constexpr uint32_t kDefaultJobsPageSize = 100;
inline constexpr uint32_t kMaxJobsPageSize = 1000;

// ListJobs writes the reply of a ListJobs call: a page of the jobs `worker`
// runs or retains that `caller` owns (JobInfo), oldest first, and how many
// others there are. INVALID_ARGUMENT for a page size over the maximum or a
// page token it did not give.
absl::Status ListJobs(Worker& worker, const JobCaller& caller,
                      const v1::ListJobsRequest& request,
                      v1::ListJobsReply& reply);

// FillStatus writes the reply of a Status call: `serve`, and the docket,
// idle time and jobs in flight of `worker` as `caller` may see them (the
// ids of its own, at most kMaxStatusJobIds; the number of the others).
inline constexpr int kMaxStatusJobIds = 100;
void FillStatus(Worker& worker, const JobCaller& caller,
                const ServeStatus& serve, v1::StatusReply& reply);

// StartCancel cancels the job of `request` and returns the call's reactor,
// which answers with the job's outcome once it has ended (holding no thread
// meanwhile): NOT_FOUND for an unknown job, INVALID_ARGUMENT for a grace
// that is NaN or negative, PERMISSION_DENIED for a job `caller` does not
// own, CANCELLED when the client leaves first (the job is cancelled all
// the same). The outcome answered counts as the job's result read.
grpc::ServerUnaryReactor* StartCancel(Worker& worker, CallTracker& calls,
                                      absl::StatusOr<v1::CancelRequest> request,
                                      const JobCaller& caller,
                                      grpc::ByteBuffer* reply);

}  // namespace cfdb::worker

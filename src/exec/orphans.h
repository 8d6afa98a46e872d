// OrphanReaper: correct PID 1 behaviour for the daemon. It marks the process
// a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so processes orphaned by
// jobs (a grandchild whose parent exited) are reparented to the worker
// rather than to an init that may not exist, and it reaps them.
#pragma once

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/shutdown.h"

namespace cfdb::worker {

class OrphanReaper {
 public:
  // Start becomes a subreaper and sweeps every `interval`. INTERNAL if the
  // kernel refuses.
  static absl::StatusOr<std::unique_ptr<OrphanReaper>> Start(Duration interval);

  // Stops the thread after a last sweep.
  ~OrphanReaper();

  // SweepOnce reaps every exited child that is not a running exec job's own
  // process; returns how many.
  static int SweepOnce();

 private:
  explicit OrphanReaper(Duration interval);
  Shutdown stop_;  // waits on the monotonic clock
  std::thread thread_;
};

}  // namespace cfdb::worker

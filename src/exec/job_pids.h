// JobPids: the processes RunExec started and has not reaped yet, so the
// orphan reaper (orphans.h) never reaps a job's own process from under it,
// and the job guard (job_guard.h) knows which process groups to kill if the
// worker dies.
#pragma once

#include <sys/types.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace cfdb::worker::internal {

struct JobPids {
  // Held while spawning, so a job that exits at once is already registered
  // when the orphan reaper looks.
  static absl::Mutex mu;
  static const absl::flat_hash_set<pid_t>& pids()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Add and Remove track a job's program, which leads a process group of
  // the same id, and tell the guard, if one listens.
  static void Add(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  static void Remove(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // SetGuard makes Add and Remove write to `fd` (-1: to no one).
  static void SetGuard(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

}  // namespace cfdb::worker::internal

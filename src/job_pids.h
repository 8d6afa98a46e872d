// JobPids: the processes RunExec started and has not reaped yet, so the
// orphan reaper (orphans.h) never reaps a job's own process from under it.
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
  static absl::flat_hash_set<pid_t>& pids() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

}  // namespace cfdb::worker::internal

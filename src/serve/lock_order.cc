#include "serve/lock_order.h"

#include "absl/synchronization/mutex.h"

namespace cfdb::worker {

void IgnoreLockOrderCycles() {
#ifndef CFDB_ASAN
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

}  // namespace cfdb::worker

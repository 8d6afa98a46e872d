#include "exec/job_pids.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace cfdb::worker::internal {
namespace {

absl::flat_hash_set<pid_t>& Pids() {
  static auto* pids = new absl::flat_hash_set<pid_t>;  // never destroyed
  return *pids;
}

int guard_fd = -1;

// Tell sends one record to the guard: +pid for a new group, -pid for one
// that ended. Four bytes: a pipe write that small is atomic.
void Tell(int32_t record) {
  if (guard_fd < 0) return;
  while (write(guard_fd, &record, sizeof record) < 0 && errno == EINTR) {
  }
}

}  // namespace

absl::Mutex JobPids::mu;

const absl::flat_hash_set<pid_t>& JobPids::pids() { return Pids(); }

void JobPids::Add(pid_t pid) {
  Pids().insert(pid);
  Tell(static_cast<int32_t>(pid));
}

void JobPids::Remove(pid_t pid) {
  Pids().erase(pid);
  Tell(-static_cast<int32_t>(pid));
}

void JobPids::SetGuard(int fd) { guard_fd = fd; }

}  // namespace cfdb::worker::internal

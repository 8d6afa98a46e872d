// JobGuard: a small process that kills every job's process group when the
// worker dies, however it dies (SIGKILL after a stop timeout, the OOM
// killer), so no job outlives a worker that could not clean up.
//
// It is a fork of the worker made at startup, in a session of its own (so
// neither a terminal's Ctrl-C nor a kill of the worker's process group
// reaches it), holding the read end of a pipe. The worker writes each job's
// process group to it as the job starts and again as it ends (JobPids).
// When the pipe reaches end of file, which the kernel makes happen when the
// worker exits, the guard sends SIGKILL to every group still registered,
// ends and removes the jobs' cgroup subtree if there is one, and exits. A job's
// program also dies with the thread that started it (PR_SET_PDEATHSIG, see
// exec.cc), which covers the program itself even without a guard; the guard
// covers the rest of its group. What left the group (setsid, setpgid) is
// contained by the job sandbox, not by the guard.
#pragma once

#include <sys/types.h>

#include <memory>

#include "absl/status/statusor.h"

namespace cfdb::worker {

class JobGuard {
 public:
  // Start forks the guard and points JobPids at it. Call while the process
  // has one thread: a fork keeps only the calling thread, and the guard runs
  // on from there. INTERNAL if the pipe or the fork fails.
  static absl::StatusOr<std::unique_ptr<JobGuard>> Start();

  // Leaves the guard running: it ends when this process does.
  ~JobGuard() = default;
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  pid_t pid() const { return pid_; }

 private:
  explicit JobGuard(pid_t pid) : pid_(pid) {}
  const pid_t pid_;
};

}  // namespace cfdb::worker

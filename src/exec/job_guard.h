// JobGuard: a small process that kills every job's process group when the
// worker dies, however it dies (SIGKILL after a stop timeout, the OOM
// killer), so no job outlives a worker that could not clean up.
//
// It is a fork of the worker made at startup, in a session of its own (so
// neither a terminal's Ctrl-C nor a kill of the worker's process group
// reaches it), holding the read end of a pipe. The worker writes each job's
// process group to it as the job starts and again as it ends (JobPids).
// When the pipe reaches end of file, which the kernel makes happen when the
// worker's last descriptor closes, the guard sends SIGKILL to every group
// still registered and exits. A job's program also dies with the thread
// that started it (PR_SET_PDEATHSIG, see exec.cc), which covers the program
// itself even without a guard; the guard covers the rest of its group.
// What left the group (setsid, setpgid) is contained by the job sandbox,
// not by the guard.
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

  // Tells the guard the worker is done (no job is left to kill) and reaps
  // it.
  ~JobGuard();
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;

  pid_t pid() const { return pid_; }

 private:
  JobGuard(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  const pid_t pid_;
  const int fd_;
};

}  // namespace cfdb::worker

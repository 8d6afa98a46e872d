// Cgroup v2 files, for containment (containment.h) and the job guard.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cfdb::worker {

// OwnCgroupDir returns the directory of this process's cgroup v2 (the
// cgroup2 mount joined with the "0::" line of /proc/self/cgroup).
// FAILED_PRECONDITION when there is none.
absl::StatusOr<std::string> OwnCgroupDir();

// JobsCgroupRoot returns where this worker, in the cgroup `own_dir`, keeps
// its jobs' cgroups: <own_dir>/cfdb-jobs-<pid>-<a number drawn once per
// process>. The same in the job guard, which is forked after a first call.
std::string JobsCgroupRoot(const std::string& own_dir);

// KillCgroup ends every process of the cgroup at `dir` and its descendants
// (cgroup.kill), waits until it is empty (up to 5 s) and removes it with
// every cgroup below it. Returns how many processes the cgroup itself held.
int KillCgroup(const std::string& dir);

// LeftoverCgroups is what RemoveLeftoverJobCgroups found: the names it
// removed, and how many it kept because they still hold processes.
struct LeftoverCgroups {
  std::vector<std::string> removed;
  int kept = 0;
};

// RemoveLeftoverJobCgroups removes, from the cgroup `parent`, the jobs'
// subtrees of workers gone: directories named cfdb-jobs-<pid>-<n> (but
// `own`), locked by no live worker (flock; held while it looks, so a
// worker making its subtree waits and sees whether it is still there),
// and empty (cgroup.events: populated 0), each with every cgroup below it.
// What it may not remove, it leaves.
LeftoverCgroups RemoveLeftoverJobCgroups(const std::string& parent,
                                         const std::string& own);

}  // namespace cfdb::worker

// ProcessTable: the view of this machine's processes that containment
// needs (children, process groups), read from /proc; a fake one stands in
// for tests. And the two questions a sweep asks of it.
#pragma once

#include <sys/types.h>

#include <vector>

#include "absl/container/flat_hash_set.h"

namespace cfdb::worker {

class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  // Children returns the children of `pid`, over all its threads; empty
  // when it is gone.
  virtual std::vector<pid_t> Children(pid_t pid) const = 0;
  // ProcessGroup returns the process group of `pid`, -1 when it is gone.
  virtual pid_t ProcessGroup(pid_t pid) const = 0;
};

// ProcFs is the real table (/proc/<pid>/task/*/children, /proc/<pid>/stat).
// Thread-safe; a snapshot of a moment, as anything read from /proc is.
class ProcFs final : public ProcessTable {
 public:
  std::vector<pid_t> Children(pid_t pid) const override;
  pid_t ProcessGroup(pid_t pid) const override;
};

// Descendants returns every descendant of `root` (not `root` itself),
// parents before their children.
std::vector<pid_t> Descendants(const ProcessTable& table, pid_t root);

// Leftovers returns the children of `self` that belong to no running job:
// neither a running job's program (`programs`, whose pids are also their
// jobs' process groups) nor in one of those process groups, nor `spared`
// (the job guard). In a worker that is a child subreaper these are what
// jobs left behind: processes re-parented to the worker after their parent
// died, outside their job's group (setsid, setpgid, a double fork).
std::vector<pid_t> Leftovers(const ProcessTable& table, pid_t self,
                             const absl::flat_hash_set<pid_t>& programs,
                             const absl::flat_hash_set<pid_t>& spared);

}  // namespace cfdb::worker

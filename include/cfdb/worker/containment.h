// Containment: how every process a job starts is made to end with the job,
// whatever it does to its process group or session.
//
//   absl::StatusOr<std::unique_ptr<Containment>> containment =
//       Containment::Start(ContainmentMode::kAuto);
//   ExecOptions exec{.containment = containment->get()};
//   worker.RegisterKind(kExecKind, ExecKind(exec));
//
// Two mechanisms, the strongest the host allows:
// - cgroup: a cgroup v2 per job, under a subtree the worker may write (root,
//   systemd's Delegate=yes, a container with a writable cgroup namespace).
//   The kernel keeps every descendant in it, whatever setsid, setpgid or a
//   double fork do, and cgroup.kill (Linux 5.14) ends them all at once.
// - subreaper: everywhere else (Fargate included). The worker is a child
//   subreaper (PR_SET_CHILD_SUBREAPER), so a process whose parent died is
//   re-parented to it, and the sweep kills any such process that belongs to
//   no running job (its process group is no running job's) at once, even
//   while its job still runs; at a job's end the job's program, its process
//   group and every descendant still attached are killed. What it cannot
//   see: a descendant of a running job that left the group while its parent
//   still lives, until the parent dies or the job ends.
// Both reap every zombie re-parented to the worker (it may be PID 1).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/shutdown.h"

namespace cfdb::worker {

enum class ContainmentMode {
  kAuto,       // a cgroup where one can be made, else the subreaper
  kCgroup,     // a cgroup or a startup error
  kSubreaper,  // the subreaper only
};

// Containment is process-wide: make one, at startup. Thread-safe.
class Containment {
 public:
  // Start makes the worker a child subreaper, and with kAuto or kCgroup a
  // cgroup subtree for jobs (cfdb-jobs-<pid>-<n> under the worker's
  // cgroup, locked with flock(2) for the worker's life, with an empty leaf
  // "worker" for the worker itself). The worker moves into that leaf later,
  // once (MoveIn): a write to cgroup.procs waits for an RCU grace period
  // (milliseconds), so it is not done on the way to the listening port;
  // but at once on a kernel before 5.16, which checks that write against
  // the writer's privileges rather than the opener's.
  // Call before dropping privileges, and with one thread. INTERNAL if the
  // kernel refuses the subreaper; FAILED_PRECONDITION for kCgroup where no
  // cgroup can be made (saying why).
  static absl::StatusOr<std::unique_ptr<Containment>> Start(
      ContainmentMode mode);

  // Delegate hands the cgroup subtree to `uid`:`gid`, the user the worker is
  // about to become, so it can make and remove its jobs' cgroups (a no-op
  // under the subreaper). INTERNAL if it cannot.
  absl::Status Delegate(uid_t uid, gid_t gid);

  // MoveIn moves the worker into its subtree's leaf, once: the first call
  // does it (through a cgroup.procs descriptor opened by Start, so it works
  // after the privileges are dropped), later ones wait for it and return
  // its result. A job's cgroup needs it done (the kernel lets a process
  // start a child in a cgroup only from within the common ancestor it may
  // write). OK under the subreaper; INTERNAL if the kernel refused.
  absl::Status MoveIn();

  // StartSweeping starts a thread of its own (call once, after dropping
  // privileges) that moves the worker in (MoveIn), finds out whether jobs
  // can start with clone3 (spawn.h, ProbeSpawn: a refusal is logged once),
  // removes the subtrees that workers gone left beside its own in its
  // cgroup (only empty ones, named cfdb-jobs-<pid>-<n>, locked by no live
  // worker), saying once how many, then sweeps every `interval`. A worker
  // that is PID 1 of its namespace takes its job guard with it when it
  // exits: its subtree goes with the container's cgroup, or at the next
  // worker's start.
  void StartSweeping(Duration interval = std::chrono::milliseconds(500));

  // Stops the thread and sweeps a last time. The cgroup subtree, which
  // holds the worker itself, goes when the worker is gone (the job guard
  // removes it; the worker does not move out, which would wait for an RCU
  // grace period on the way to its exit).
  ~Containment();
  Containment(const Containment&) = delete;
  Containment& operator=(const Containment&) = delete;

  // uses_cgroups tells which mechanism is active; Describe says it, why it
  // was chosen (asked for, or kAuto's choice and, for the subreaper, why no
  // cgroup could be made) and what it guarantees, for the startup log.
  bool uses_cgroups() const { return !root_.empty(); }
  std::string Describe() const;

  // JobCgroup makes an empty cgroup for one job and returns its directory
  // ("" under the subreaper), after MoveIn. INTERNAL if it cannot be made
  // or the worker could not move in.
  absl::StatusOr<std::string> JobCgroup();

  // Sweep kills what jobs left behind (under the subreaper: processes
  // re-parented to the worker that belong to no running job's process
  // group, with every descendant) and reaps every exited
  // child that is not a running job's program. Returns how many processes
  // it killed.
  int Sweep();

  // Spare keeps `pid` (the job guard) out of every sweep.
  void Spare(pid_t pid);

 private:
  Containment(std::string root, std::string why, int move_fd);

  // RemoveLeftovers removes what StartSweeping says, and logs it.
  void RemoveLeftovers() const;

  const std::string root_;  // the jobs' cgroup subtree, "" without one
  const std::string why_;   // why this mechanism, for Describe
  int move_fd_;             // root_/worker/cgroup.procs until MoveIn
  absl::once_flag move_once_;
  absl::Status moved_;
  Shutdown stop_;
  std::thread thread_;
};

}  // namespace cfdb::worker

#include "cfdb/worker/containment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "exec/cgroup.h"
#include "exec/job_pids.h"
#include "exec/process_table.h"
#include "exec/spawn.h"

namespace cfdb::worker {
namespace {

absl::Mutex spared_mu;
absl::flat_hash_set<pid_t>& Spared() ABSL_EXCLUSIVE_LOCKS_REQUIRED(spared_mu) {
  static auto* spared = new absl::flat_hash_set<pid_t>;  // never destroyed
  return *spared;
}

std::atomic<int> next_job{0};

// JobsRoot is the jobs' subtree made, and the descriptor that moves the
// worker in.
struct JobsRoot {
  std::string dir;
  int move_fd;
};

// CannotUse cleans up a subtree half made and says why it cannot be used.
absl::Status CannotUse(const std::string& root, int lock_fd) {
  const std::string why = ErrnoText(errno);
  if (lock_fd >= 0) close(lock_fd);
  rmdir((root + "/worker").c_str());
  rmdir(root.c_str());
  return absl::FailedPreconditionError(absl::StrCat(
      "cgroup ", root, " cannot hold the worker and kill its jobs (", why,
      "; cgroup.kill needs Linux 5.14)"));
}

// MakeJobsRoot makes the jobs' subtree under this process's cgroup, locks
// it (flock: a live worker's, which no other worker removes), checks it
// can kill (cgroup.kill, Linux 5.14), and makes the leaf the worker will
// move into ("worker"), so that the subtree is the common ancestor of the
// worker and its jobs: starting a job's program in its cgroup then needs
// write access to the subtree only, which the worker keeps after dropping
// its privileges. The leaf's cgroup.procs is opened now, while the worker
// may: the kernel (5.16+) checks a write against the opener. The job guard
// removes the subtree when the worker is gone.
absl::StatusOr<JobsRoot> MakeJobsRoot() {
  absl::StatusOr<std::string> own = OwnCgroupDir();
  if (!own.ok()) return own.status();
  std::string root = JobsCgroupRoot(*own);
  // The lock is held open for the process's life: it goes with the worker,
  // not before, so no other worker takes the subtree for a leftover while
  // this one runs. Between the mkdir and the lock another worker's sweep
  // may take the new, empty subtree for one and remove it (it holds the
  // lock while it looks): then it is made again.
  int lock_fd = -1;
  for (int attempt = 0;; ++attempt) {
    if (mkdir(root.c_str(), 0755) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make the cgroup ", root, ": ", ErrnoText(errno),
          " (the cgroup subtree is not delegated to this process)"));
    }
    lock_fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
      return CannotUse(root, lock_fd);
    }
    if (access((root + "/cgroup.procs").c_str(), F_OK) == 0) break;
    close(lock_fd);
    if (attempt == 2) return CannotUse(root, -1);
  }
  if (access((root + "/cgroup.kill").c_str(), W_OK) != 0 ||
      mkdir((root + "/worker").c_str(), 0755) != 0) {
    return CannotUse(root, lock_fd);
  }
  const int move_fd =
      open((root + "/worker/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (move_fd < 0) return CannotUse(root, lock_fd);
  return JobsRoot{.dir = std::move(root), .move_fd = move_fd};
}

// ChecksOpener tells whether this kernel checks a cgroup.procs write
// against the credentials of the file's opener (Linux 5.16 and later), so
// that a descriptor opened while privileged moves the worker after it
// dropped them.
bool ChecksOpener() {
  utsname name{};
  if (uname(&name) != 0) return false;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(name.release, absl::MaxSplits('.', 2));
  int major = 0, minor = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major) ||
      !absl::SimpleAtoi(parts[1], &minor)) {
    return false;
  }
  return major > 5 || (major == 5 && minor >= 16);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Containment>> Containment::Start(
    ContainmentMode mode) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::InternalError(
        absl::StrCat("prctl(PR_SET_CHILD_SUBREAPER): ", ErrnoText(errno)));
  }
  if (mode == ContainmentMode::kSubreaper) {
    return std::unique_ptr<Containment>(new Containment("", "as asked", -1));
  }
  absl::StatusOr<JobsRoot> made = MakeJobsRoot();
  if (made.ok()) {
    std::unique_ptr<Containment> containment(new Containment(
        made->dir,
        mode == ContainmentMode::kAuto ? "auto: cgroup v2 is writable"
                                       : "as asked",
        made->move_fd));
    // A kernel that checks the writer rather than the opener: now, while
    // the worker still has its privileges.
    if (!ChecksOpener()) {
      if (absl::Status s = containment->MoveIn(); !s.ok()) return s;
    }
    return containment;
  }
  if (mode == ContainmentMode::kCgroup) return made.status();
  return std::unique_ptr<Containment>(new Containment(
      "", absl::StrCat("auto: no cgroup here: ", made.status().message()), -1));
}

Containment::Containment(std::string root, std::string why, int move_fd)
    : root_(std::move(root)), why_(std::move(why)), move_fd_(move_fd) {}

Containment::~Containment() {
  stop_.Stop();
  if (thread_.joinable()) thread_.join();
  Sweep();
  if (move_fd_ >= 0) close(move_fd_);
  // The lock goes with the process: the subtree is the job guard's to
  // remove once the worker has exited, and no other worker's before.
}

absl::Status Containment::MoveIn() {
  absl::call_once(move_once_, [this] {
    if (move_fd_ < 0) return;
    const std::string pid = absl::StrCat(getpid());
    if (write(move_fd_, pid.data(), pid.size()) !=
        static_cast<ssize_t>(pid.size())) {
      moved_ = absl::InternalError(
          absl::StrCat("cannot move the worker into its cgroup ", root_,
                       "/worker: ", ErrnoText(errno)));
    }
    close(move_fd_);
    move_fd_ = -1;
  });
  return moved_;
}

absl::Status Containment::Delegate(uid_t uid, gid_t gid) {
  if (root_.empty()) return absl::OkStatus();
  // What the kernel checks: write access to the subtree (to make and remove
  // cgroups) and to the cgroup.procs of the common ancestor of the worker
  // and its jobs, the subtree itself.
  for (const std::string& path :
       {root_, root_ + "/cgroup.procs", root_ + "/cgroup.threads",
        root_ + "/cgroup.subtree_control", root_ + "/worker",
        root_ + "/worker/cgroup.procs"}) {
    if (chown(path.c_str(), uid, gid) != 0) {
      return absl::InternalError(absl::StrCat("cannot hand ", path, " to uid ",
                                              uid, ": ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

void Containment::StartSweeping(Duration interval) {
  thread_ = std::thread([this, interval] {
    if (absl::Status s = MoveIn(); !s.ok()) {
      spdlog::error("job containment: {}; jobs cannot start",
                    std::string(s.message()));
    }
    internal::ProbeSpawn(uses_cgroups() ? root_ + "/worker" : "");
    if (uses_cgroups()) RemoveLeftovers();
    const Watcher watcher = stop_.watcher();
    while (watcher.WaitUntil(std::chrono::steady_clock::now() + interval)) {
      Sweep();
    }
  });
}

std::string Containment::Describe() const {
  if (uses_cgroups()) {
    return absl::StrCat(
        "job containment: a cgroup per job under ", root_, " (", why_,
        "): every process a job starts ends with it, whatever it does to its "
        "process group or session");
  }
  return absl::StrCat(
      "job containment: subreaper (", why_,
      "): a job's program, its process group and its descendants end with "
      "it, and any process re-parented to the worker outside a running "
      "job's group is killed at once");
}

void Containment::RemoveLeftovers() const {
  const std::string parent = root_.substr(0, root_.rfind('/'));
  const LeftoverCgroups left =
      RemoveLeftoverJobCgroups(parent, root_.substr(parent.size() + 1));
  if (!left.removed.empty()) {
    spdlog::info(
        "job containment: removed {} empty cgroup subtree(s) of workers "
        "gone from {}: {}",
        left.removed.size(), parent, absl::StrJoin(left.removed, ", "));
  }
  if (left.kept > 0) {
    spdlog::warn(
        "job containment: {} cgroup subtree(s) of workers gone from {} "
        "(cfdb-jobs-*) still hold processes: left as they are",
        left.kept, parent);
  }
}

absl::StatusOr<std::string> Containment::JobCgroup() {
  if (root_.empty()) return std::string();
  if (absl::Status s = MoveIn(); !s.ok()) return s;
  std::string dir = absl::StrCat(root_, "/job-", next_job++);
  if (mkdir(dir.c_str(), 0755) != 0) {
    return absl::InternalError(absl::StrCat("cannot make the job's cgroup ",
                                            dir, ": ", ErrnoText(errno)));
  }
  return dir;
}

void Containment::Spare(pid_t pid) {
  absl::MutexLock lock(&spared_mu);
  Spared().insert(pid);
}

int Containment::Sweep() {
  const ProcFs table;
  const pid_t self = getpid();
  int killed = 0;
  // A tree killed may leave grandchildren that only then are re-parented
  // here: go again until nothing is left (a bounded number of rounds).
  for (int round = 0; round < 16 && !uses_cgroups(); ++round) {
    std::vector<pid_t> leftovers;
    {
      absl::flat_hash_set<pid_t> spared;
      {
        absl::MutexLock lock(&spared_mu);
        spared = Spared();
      }
      // Held while killing, so that no job's program starts meanwhile.
      absl::MutexLock lock(&internal::JobPids::mu);
      leftovers = Leftovers(table, self, internal::JobPids::pids(), spared);
      for (pid_t leftover : leftovers) {
        for (pid_t pid : Descendants(table, leftover))
          killed += kill(pid, SIGKILL) == 0;
        killed += kill(leftover, SIGKILL) == 0;
      }
    }
    if (leftovers.empty()) break;
    for (pid_t leftover : leftovers) {
      while (waitpid(leftover, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  // Reap what exited: orphans of jobs, and what the kills above ended.
  for (pid_t child : table.Children(self)) {
    {
      absl::MutexLock lock(&spared_mu);
      if (Spared().contains(child)) continue;
    }
    absl::MutexLock lock(&internal::JobPids::mu);
    if (internal::JobPids::pids().contains(child)) continue;
    waitpid(child, nullptr, WNOHANG);
  }
  return killed;
}

}  // namespace cfdb::worker

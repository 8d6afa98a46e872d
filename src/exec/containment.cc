#include "cfdb/worker/containment.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/errno_text.h"
#include "exec/cgroup.h"
#include "exec/job_pids.h"
#include "exec/process_table.h"

namespace cfdb::worker {
namespace {

absl::Mutex spared_mu;
absl::flat_hash_set<pid_t>& Spared() ABSL_EXCLUSIVE_LOCKS_REQUIRED(spared_mu) {
  static auto* spared = new absl::flat_hash_set<pid_t>;  // never destroyed
  return *spared;
}

std::atomic<int> next_job{0};

bool WriteFile(const std::string& path, std::string_view text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// MakeJobsRoot makes the jobs' subtree under this process's cgroup, checks
// it can kill (cgroup.kill, Linux 5.14), and moves this process into a
// leaf of it ("worker"), so that the subtree is the common ancestor of the
// worker and its jobs: moving a job's program into its cgroup then needs
// write access to the subtree only, which the worker keeps after dropping
// its privileges. The job guard removes the subtree when the worker is gone.
absl::StatusOr<std::string> MakeJobsRoot() {
  absl::StatusOr<std::string> own = OwnCgroupDir();
  if (!own.ok()) return own.status();
  std::string root = JobsCgroupRoot(*own);
  if (mkdir(root.c_str(), 0755) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make the cgroup ", root, ": ", ErrnoText(errno),
                     " (the cgroup subtree is not delegated to this process)"));
  }
  const std::string worker = root + "/worker";
  if (access((root + "/cgroup.kill").c_str(), W_OK) != 0 ||
      mkdir(worker.c_str(), 0755) != 0 ||
      !WriteFile(worker + "/cgroup.procs", absl::StrCat(getpid()))) {
    const std::string why = ErrnoText(errno);
    rmdir(worker.c_str());
    rmdir(root.c_str());
    return absl::FailedPreconditionError(absl::StrCat(
        "cgroup ", root, " cannot hold the worker and kill its jobs (", why,
        "; cgroup.kill needs Linux 5.14)"));
  }
  return root;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Containment>> Containment::Start(
    ContainmentMode mode) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::InternalError(
        absl::StrCat("prctl(PR_SET_CHILD_SUBREAPER): ", ErrnoText(errno)));
  }
  if (mode == ContainmentMode::kSubreaper) {
    return std::unique_ptr<Containment>(new Containment("", "as asked"));
  }
  absl::StatusOr<std::string> made = MakeJobsRoot();
  if (made.ok()) {
    return std::unique_ptr<Containment>(new Containment(
        *made, mode == ContainmentMode::kAuto ? "auto: cgroup v2 is writable"
                                              : "as asked"));
  }
  if (mode == ContainmentMode::kCgroup) return made.status();
  return std::unique_ptr<Containment>(new Containment(
      "", absl::StrCat("auto: no cgroup here: ", made.status().message())));
}

Containment::Containment(std::string root, std::string why)
    : root_(std::move(root)), why_(std::move(why)) {}

Containment::~Containment() {
  stop_.Stop();
  if (thread_.joinable()) thread_.join();
  Sweep();
  // Back to the cgroup it came from, and the subtree away, where the
  // worker still may (as root); else the job guard does it after the exit.
  if (root_.empty()) return;
  const std::string back = root_.substr(0, root_.rfind('/'));
  if (WriteFile(back + "/cgroup.procs", absl::StrCat(getpid()))) {
    KillCgroup(root_);
  }
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

absl::StatusOr<std::string> Containment::JobCgroup() {
  if (root_.empty()) return std::string();
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

#include "exec/orphans.h"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/errno_text.h"
#include "exec/job_pids.h"

namespace cfdb::worker {
namespace {

// Children lists every child of this process, over all its threads
// (/proc/self/task/*/children).
std::vector<pid_t> Children() {
  std::vector<pid_t> pids;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task", error)) {
    std::ifstream in(task.path() / "children");
    for (pid_t pid; in >> pid;) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OrphanReaper>> OrphanReaper::Start(
    Duration interval) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    return absl::InternalError(
        absl::StrCat("prctl(PR_SET_CHILD_SUBREAPER): ", ErrnoText(errno)));
  }
  return std::unique_ptr<OrphanReaper>(new OrphanReaper(interval));
}

OrphanReaper::OrphanReaper(Duration interval)
    : thread_([watcher = stop_.watcher(), interval] {
        while (watcher.WaitUntil(std::chrono::steady_clock::now() + interval)) {
          SweepOnce();
        }
        SweepOnce();
      }) {}

OrphanReaper::~OrphanReaper() {
  stop_.Stop();
  thread_.join();
}

int OrphanReaper::SweepOnce() {
  int reaped = 0;
  for (pid_t pid : Children()) {
    absl::MutexLock lock(&internal::JobPids::mu);
    if (internal::JobPids::pids().contains(pid)) continue;
    if (waitpid(pid, nullptr, WNOHANG) == pid) ++reaped;
  }
  return reaped;
}

}  // namespace cfdb::worker

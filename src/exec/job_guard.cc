#include "exec/job_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/errno_text.h"
#include "exec/cgroup.h"
#include "exec/job_pids.h"

namespace cfdb::worker {
namespace {

// Guard is the guard process's whole life: read records until end of file,
// then kill what is left.
[[noreturn]] void Guard(int fd, const std::string& jobs_cgroup) {
  setsid();
  prctl(PR_SET_NAME, "cfdb-job-guard");
  for (int signo : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) signal(signo, SIG_IGN);
  // Nothing of the worker's but the pipe: no descriptor held open for
  // anyone else (a log pipe, a listening socket), stdio on /dev/null.
  const int null = open("/dev/null", O_RDWR);
  for (int target = 0; target < 3; ++target) dup2(null, target);
  const int in = fcntl(fd, F_DUPFD, 3);
  if (in > 3) dup2(in, 3);
  syscall(SYS_close_range, 4U, ~0U, 0U);

  absl::flat_hash_set<pid_t> groups;
  int32_t record = 0;
  while (true) {
    const ssize_t n = read(3, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof record) break;  // end of file: the worker is gone
    if (record > 0) {
      groups.insert(record);
    } else {
      groups.erase(-record);
    }
  }
  for (pid_t group : groups) kill(-group, SIGKILL);
  // Under cgroup containment the worker's jobs, and the worker, were in
  // this subtree: end what is left of it and remove it.
  if (!jobs_cgroup.empty() && access(jobs_cgroup.c_str(), F_OK) == 0) {
    KillCgroup(jobs_cgroup);
  }
  _exit(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobGuard>> JobGuard::Start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("job guard: pipe: ", ErrnoText(errno)));
  }
  // Where the worker's jobs' cgroups will be, if it uses them (the guard
  // stays in the worker's present cgroup).
  absl::StatusOr<std::string> own = OwnCgroupDir();
  const std::string jobs_cgroup = own.ok() ? JobsCgroupRoot(*own) : "";
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(
        absl::StrCat("job guard: fork: ", ErrnoText(error)));
  }
  if (pid == 0) Guard(fds[0], jobs_cgroup);
  close(fds[0]);
  absl::MutexLock lock(&internal::JobPids::mu);
  internal::JobPids::SetGuard(fds[1]);
  return std::unique_ptr<JobGuard>(new JobGuard(pid));
}

// The descriptor stays open: the guard sees its end of file when this
// process exits, whatever way, and cleans up then (were it to go now, it
// would end the worker itself, which under cgroups is in the subtree it
// removes).

}  // namespace cfdb::worker

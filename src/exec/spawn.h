// Starting a job's program: clone3 straight into its cgroup (else vfork) +
// execve as the job's user, with the given descriptors as its stdin, stdout
// and stderr (exec.cc), and the descriptor helpers it and the poll loop
// share.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cfdb/worker/exec.h"

namespace cfdb::worker::internal {

// Fd closes a descriptor when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Pipe is both ends of a pipe(2).
struct Pipe {
  Fd read;
  Fd write;
};

// MakePipe makes a close-on-exec pipe; none when out of descriptors
// (errno says why).
std::optional<Pipe> MakePipe();

// SetNonBlocking sets O_NONBLOCK on `fd`.
void SetNonBlocking(int fd);

// Identity is who a program runs as, where, and in which cgroup.
struct Identity {
  std::string cwd;     // "": the worker's own
  std::string cgroup;  // the job cgroup's directory; "": none
  std::optional<JobUser> user;
  uid_t uid = 0;  // user->uid + the job's uid slot
  rlim_t nproc = 0;
  rlim_t nofile = 0;
};

// Whether this build starts jobs with clone3: on x86-64 outside the
// sanitizers. ThreadSanitizer follows vfork as a fork and would not follow
// a child it was not told of, and AddressSanitizer's stack bookkeeping
// breaks on a child that runs on a stack it does not know with the
// parent's thread state: the sanitizer builds test the vfork way, the
// others both.
#if defined(CFDB_ASAN) || defined(CFDB_TSAN) || \
    defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CFDB_SPAWN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CFDB_SPAWN_SANITIZED 1
#endif
#endif
#if defined(__x86_64__) && !defined(CFDB_SPAWN_SANITIZED)
#define CFDB_SPAWN_CLONE3 1
inline constexpr bool kSpawnsWithClone3 = true;
#else
inline constexpr bool kSpawnsWithClone3 = false;
#endif

// Spawned is a program started: its pid and, where the kernel gave one at
// the start (clone3's CLONE_PIDFD), a pidfd for it (else none).
struct Spawned {
  pid_t pid = -1;
  Fd pidfd;
};

// Spawn starts `spec` as `who` with the given ends as fds 0, 1 and 2 and
// registers its pid (JobPids). Where the kernel has clone3 (Linux 5.7+ for
// CLONE_INTO_CGROUP) and no seccomp filter refuses it, the child is created
// in its cgroup with a pidfd (CLONE_INTO_CGROUP | CLONE_PIDFD, vfork's
// semantics: CLONE_VM | CLONE_VFORK on a stack of its own): no cgroup.procs
// write, which waits for an RCU grace period, and no pidfd_open. Else (the
// first refusal is logged once, and every later spawn takes this way) it is
// vforked and writes itself into the cgroup's cgroup.procs. Returns the
// program; FAILED_PRECONDITION when the child could not set itself up or
// exec (the message says which step and why), INTERNAL when no pipe or
// process could be made. Thread-safe: the child is created under
// JobPids::mu.
absl::StatusOr<Spawned> Spawn(const ExecSpec& spec, const Identity& who, int in,
                              int out, int err);

// ProbeSpawn finds out, with a child that exits at once, whether this
// kernel lets Spawn take clone3 (into `cgroup`, a cgroup's directory where
// not ""), so that a refusal is said at start rather than at the first
// job. Thread-safe; takes JobPids::mu.
void ProbeSpawn(const std::string& cgroup);

}  // namespace cfdb::worker::internal

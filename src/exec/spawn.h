// Starting a job's program: vfork + execve as the job's user, in its cgroup,
// with the given descriptors as its stdin, stdout and stderr (exec.cc), and
// the descriptor helpers it and the poll loop share.
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
  std::string cwd;           // "": the worker's own
  std::string cgroup_procs;  // "": none
  std::optional<JobUser> user;
  uid_t uid = 0;  // user->uid + the job's uid slot
  rlim_t nproc = 0;
  rlim_t nofile = 0;
};

// Spawn starts `spec` as `who` with the given ends as fds 0, 1 and 2 and
// registers its pid (JobPids). Returns the pid; FAILED_PRECONDITION when the
// child could not set itself up or exec (the message says which step and
// why), INTERNAL when no pipe or process could be made. Thread-safe: the
// child is forked under JobPids::mu.
absl::StatusOr<pid_t> Spawn(const ExecSpec& spec, const Identity& who, int in,
                            int out, int err);

}  // namespace cfdb::worker::internal

// The "exec" job kind: posix_spawnp + a poll(2) loop over the program's
// pipes, its pidfd, the job's cancel descriptor and its timers.
#include "cfdb/worker/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "job_pids.h"

namespace cfdb::worker {

namespace internal {

absl::Mutex JobPids::mu;

absl::flat_hash_set<pid_t>& JobPids::pids() {
  static auto* pids = new absl::flat_hash_set<pid_t>;
  return *pids;
}

}  // namespace internal

namespace {

// A chunk is what one Output message carries. Reading until the pipe is
// empty, up to this, turns a fast writer's output into few large messages
// instead of one per pipe-sized read.
constexpr std::size_t kChunkBytes = 1 << 20;
// Asked of the kernel for each output pipe (best effort; the default is
// 64 KiB, the ceiling /proc/sys/fs/pipe-max-size, 1 MiB by default).
constexpr int kPipeBytes = 1 << 20;
// Without a pidfd (kernels before 5.3) the loop checks on the child this
// often.
constexpr auto kExitCheckInterval = std::chrono::milliseconds(50);

using Failure = JobOutcome::Failure;

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

struct Pipe {
  Fd read;
  Fd write;
};

std::optional<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Spawner holds what posix_spawnp needs and frees it on every path.
class Spawner {
 public:
  Spawner() {
    posix_spawn_file_actions_init(&actions_);
    posix_spawnattr_init(&attr_);
  }
  ~Spawner() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }

  // Spawn starts `spec` with the given ends as fds 0, 1 and 2. Returns the
  // pid or an errno value.
  std::pair<pid_t, int> Spawn(const ExecSpec& spec, int in, int out, int err) {
    posix_spawn_file_actions_adddup2(&actions_, in, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions_, out, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions_, err, STDERR_FILENO);
    if (!spec.cwd.empty()) {
      posix_spawn_file_actions_addchdir_np(&actions_, spec.cwd.c_str());
    }
    // Own process group, no blocked signals, default dispositions: the
    // worker blocks SIGTERM/SIGINT and ignores SIGPIPE, the job must not.
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setpgroup(&attr_, 0);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setsigdefault(&attr_, &all);
    posix_spawnattr_setflags(&attr_, POSIX_SPAWN_SETPGROUP |
                                         POSIX_SPAWN_SETSIGMASK |
                                         POSIX_SPAWN_SETSIGDEF);

    std::vector<char*> argv;
    for (const std::string& arg : spec.argv) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : spec.env) {
      env_strings.push_back(absl::StrCat(name, "=", value));
    }
    std::vector<char*> envp;
    for (std::string& entry : env_strings) envp.push_back(entry.data());
    envp.push_back(nullptr);

    pid_t pid = -1;
    absl::MutexLock lock(&internal::JobPids::mu);
    const int error = posix_spawnp(&pid, argv[0], &actions_, &attr_,
                                   argv.data(), envp.data());
    if (error == 0) internal::JobPids::pids().insert(pid);
    return {pid, error};
  }

 private:
  posix_spawn_file_actions_t actions_;
  posix_spawnattr_t attr_;
};

// Output is one of the program's output pipes and the chunk, if any, that
// waits for the client to make room.
struct Output {
  OutputStream stream;
  Fd fd;
  std::string pending;
};

// ReadBuffer is the calling thread's buffer for pipe reads, kChunkBytes
// long: made once per job thread and reused by every job it runs, never
// zero-filled, so a job that prints little touches few of its pages.
char* ReadBuffer() {
  thread_local const std::unique_ptr<char[]> buffer(new char[kChunkBytes]);
  return buffer.get();
}

// Run is one running program.
class Run {
 public:
  Run(JobContext& ctx, pid_t pid, Fd in, Fd out, Fd err)
      : ctx_(ctx),
        pid_(pid),
        pidfd_(static_cast<int>(syscall(SYS_pidfd_open, pid, 0))),
        stdin_(std::move(in)),
        outputs_{Output{OutputStream::kStdout, std::move(out), {}},
                 Output{OutputStream::kStderr, std::move(err), {}}} {
    const Duration limit = ctx.request().exec.time_limit;
    if (limit > Duration::zero()) {
      time_limit_at_ = std::chrono::steady_clock::now() + limit;
    }
    if (ctx.request().exec.stdin_data.empty()) stdin_.Reset();
    if (stdin_) SetNonBlocking(stdin_.get());
    for (Output& o : outputs_) {
      SetNonBlocking(o.fd.get());
      fcntl(o.fd.get(), F_SETPIPE_SZ, kPipeBytes);
    }
  }

  JobOutcome Wait() {
    while (!exited_) {
      CheckTimers();
      if (!FlushPending()) continue;
      PollOnce();
    }
    // The program is gone; collect what it left in the pipes, no more.
    for (Output& o : outputs_) {
      do {
        while (!FlushPending()) CheckTimers();
      } while (o.fd && ReadChunk(o));
    }
    while (!FlushPending()) CheckTimers();
    return Outcome();
  }

 private:
  // CheckTimers starts cancelling on cancel or time limit, and escalates to
  // SIGKILL after the kill grace.
  void CheckTimers() {
    const TimePoint now = std::chrono::steady_clock::now();
    if (exited_) return;
    if (!cancel_reason_) {
      if (ctx_.cancelled()) {
        cancel_reason_ = Failure::kCancelled;
      } else if (now >= time_limit_at_) {
        cancel_reason_ = Failure::kTimeLimitExceeded;
      }
      if (cancel_reason_) {
        killpg(pid_, SIGTERM);
        kill_at_ = now + ctx_.kill_grace();
      }
    }
    if (cancel_reason_ && !killed_ && now >= kill_at_) {
      killpg(pid_, SIGKILL);
      killed_ = true;
    }
  }

  TimePoint NextTimer() const {
    if (exited_) return TimePoint::max();
    if (!cancel_reason_) return time_limit_at_;
    return killed_ ? TimePoint::max() : kill_at_;
  }

  // FlushPending hands waiting chunks to the client. Returns false if one
  // is still waiting because a timer is due. Output of a cancelled job is
  // discarded, so a client that stopped reading cannot hold up the kill.
  bool FlushPending() {
    for (Output& o : outputs_) {
      if (o.pending.empty()) continue;
      if (cancel_reason_) {
        o.pending.clear();
        continue;
      }
      switch (ctx_.Emit(o.stream, o.pending, NextTimer())) {
        case JobContext::EmitResult::kTimedOut: return false;
        case JobContext::EmitResult::kSent:
        case JobContext::EmitResult::kDropped: o.pending.clear(); break;
      }
    }
    return true;
  }

  // ReadChunk reads what `o` holds, up to one chunk, into its pending chunk
  // (discarded once the job is cancelled). Returns false when nothing was
  // read: at EOF (the descriptor is then closed) or when nothing is ready.
  bool ReadChunk(Output& o) {
    char* const buffer = ReadBuffer();
    size_t got = 0;
    while (got < kChunkBytes) {
      const ssize_t n = read(o.fd.get(), buffer + got, kChunkBytes - got);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || errno != EAGAIN) o.fd.Reset();
      break;
    }
    if (got > 0 && !cancel_reason_) o.pending.assign(buffer, got);
    return got > 0;
  }

  void PollOnce() {
    std::vector<pollfd> fds;
    auto watch = [&fds](int fd, short events) {
      fds.push_back(pollfd{fd, events, 0});
      return fds.size() - 1;
    };
    const size_t none = SIZE_MAX;
    size_t out_at[2] = {none, none};
    for (int i = 0; i < 2; ++i) {
      if (outputs_[i].fd) out_at[i] = watch(outputs_[i].fd.get(), POLLIN);
    }
    const size_t in_at = stdin_ ? watch(stdin_.get(), POLLOUT) : none;
    const size_t pid_at = pidfd_ ? watch(pidfd_.get(), POLLIN) : none;
    if (!cancel_reason_) watch(ctx_.cancel_fd(), POLLIN);

    TimePoint wake = NextTimer();
    if (!pidfd_) {
      wake = std::min(wake, std::chrono::steady_clock::now() +
                                kExitCheckInterval);
    }
    int timeout_ms = -1;
    if (wake != TimePoint::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          wake - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(left.count(), 0, 24 * 3600 * 1000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      // Out of resources: fall back to waiting for the program itself.
      std::this_thread::sleep_for(kExitCheckInterval);
    }
    for (int i = 0; i < 2; ++i) {
      if (out_at[i] != none && fds[out_at[i]].revents != 0) {
        ReadChunk(outputs_[i]);
      }
    }
    if (in_at != none && fds[in_at].revents != 0) WriteStdin();
    if (pid_at == none || fds[pid_at].revents != 0) Reap(pid_at != none);
  }

  void WriteStdin() {
    const std::string& data = ctx_.request().exec.stdin_data;
    const ssize_t n = write(stdin_.get(), data.data() + stdin_written_,
                            data.size() - stdin_written_);
    if (n > 0) stdin_written_ += static_cast<size_t>(n);
    if (n < 0 && errno == EPIPE) {
      // The program closed its stdin: consume this thread's SIGPIPE.
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      const timespec zero{};
      sigtimedwait(&pipe_set, nullptr, &zero);
    }
    if (stdin_written_ == data.size() || (n < 0 && errno != EAGAIN)) {
      stdin_.Reset();
    }
  }

  // Reap collects the program once it has exited. `known_exited` is true
  // when the pidfd said so; otherwise this only checks.
  void Reap(bool known_exited) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info,
               WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == 0) {
      if (!known_exited) return;
    }
    // The exited leader still holds its pid, so the group id cannot have
    // been reused: kill whatever it left behind, then reap it.
    killpg(pid_, SIGKILL);
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    {
      absl::MutexLock lock(&internal::JobPids::mu);
      internal::JobPids::pids().erase(pid_);
    }
    exited_ = true;
  }

  JobOutcome Outcome() const {
    if (cancel_reason_) {
      const char* why = *cancel_reason_ == Failure::kTimeLimitExceeded
                            ? "time limit exceeded"
                            : "cancelled";
      return JobOutcome::Failed(
          *cancel_reason_,
          absl::StrCat(why, "; the process group got SIGTERM",
                       killed_ ? " and then SIGKILL" : ""));
    }
    if (WIFSIGNALED(status_)) return JobOutcome::Signaled(WTERMSIG(status_));
    return JobOutcome::Exited(WEXITSTATUS(status_));
  }

  JobContext& ctx_;
  const pid_t pid_;
  Fd pidfd_;
  Fd stdin_;
  size_t stdin_written_ = 0;
  Output outputs_[2];
  TimePoint time_limit_at_ = TimePoint::max();
  std::optional<Failure> cancel_reason_;
  TimePoint kill_at_ = TimePoint::max();
  bool killed_ = false;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace

JobOutcome RunExec(JobContext& ctx) {
  const ExecSpec& spec = ctx.request().exec;
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

  if (!spec.cwd.empty()) {
    struct stat st;
    const char* problem = stat(spec.cwd.c_str(), &st) != 0 ? strerror(errno)
                          : !S_ISDIR(st.st_mode)           ? "not a directory"
                                                           : nullptr;
    if (problem != nullptr) {
      return JobOutcome::Failed(
          Failure::kStartFailed,
          absl::StrCat("working directory ", spec.cwd, ": ", problem));
    }
  }
  std::optional<Pipe> in = MakePipe(), out = MakePipe(), err = MakePipe();
  if (!in || !out || !err) {
    return JobOutcome::Failed(Failure::kStartFailed,
                              absl::StrCat("pipe: ", strerror(errno)));
  }
  auto [pid, error] = Spawner().Spawn(spec, in->read.get(), out->write.get(),
                                      err->write.get());
  if (error != 0) {
    return JobOutcome::Failed(Failure::kStartFailed,
                              absl::StrCat(spec.argv[0], ": ", strerror(error)));
  }
  in->read.Reset();
  out->write.Reset();
  err->write.Reset();
  return Run(ctx, pid, std::move(in->write), std::move(out->read),
             std::move(err->read))
      .Wait();
}

}  // namespace cfdb::worker

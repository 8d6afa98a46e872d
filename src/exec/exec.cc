// The "exec" job kind: vfork + execve + a poll(2) loop over the program's
// pipes, its pidfd, the job's cancel descriptor and its timers.
#include "cfdb/worker/exec.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/limits.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "core/text.h"
#include "exec/cgroup.h"
#include "exec/job_pids.h"
#include "exec/process_table.h"

namespace cfdb::worker {

namespace {

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

// ChildPlan is everything the child does between vfork(2) and execve(2),
// prepared by the parent: the child shares the parent's memory until it
// execs, so it may only make system calls; it allocates nothing and takes no
// lock.
struct ChildPlan {
  int in, out, err;          // become fds 0, 1 and 2
  int report;                // close-on-exec: gets a ChildError
  const char* cwd;           // nullptr: the worker's own
  const char* cgroup_procs;  // the job cgroup's cgroup.procs, or null
  bool drop;                 // become uid/gid, without privileges
  uid_t uid;
  gid_t gid;
  rlim_t nproc;                         // RLIMIT_NPROC; 0: unchanged
  rlim_t nofile;                        // soft RLIMIT_NOFILE; 0: unchanged
  std::vector<const char*> candidates;  // paths to execve, in PATH order
  char* const* argv;
  char* const* envp;
  pid_t parent;
};

// ChildError is what a child that could not exec reports: the step that
// failed and its errno.
struct ChildError {
  enum Step : int { kSetup, kCwd, kExec } step;
  int error;
};

// Fail reports the failed step to the parent through the plan's pipe
// (which a successful exec closes instead) and ends the child. A pipe rather
// than the shared memory of vfork: where vfork is a fork (under TSan) it
// holds.
[[noreturn]] void Fail(const ChildPlan& plan, ChildError::Step step,
                       int error) {
  const ChildError report{step, error};
  (void)!write(plan.report, &report, sizeof report);
  _exit(127);
}

// DropPrivileges makes the child the job's user: its rlimit, no
// supplementary group, its gid and uid, no capability in any set, and
// no_new_privs so that nothing it execs gains any. Raw system calls: glibc's
// setuid family signals every thread of the process, and the vforked child
// shares the parent's thread list.
void DropPrivileges(const ChildPlan& plan) {
  if (plan.nproc != 0) {
    const rlimit limit{plan.nproc, plan.nproc};
    if (setrlimit(RLIMIT_NPROC, &limit) != 0)
      Fail(plan, ChildError::kSetup, errno);
  }
  if (rlimit files{};
      plan.nofile != 0 && getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = std::min(plan.nofile, files.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &files) != 0)
      Fail(plan, ChildError::kSetup, errno);
  }
  if (!plan.drop) return;
  const gid_t groups[1] = {plan.gid};
  if (syscall(SYS_setgroups, 1, groups) != 0 ||
      syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0 ||
      syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
    Fail(plan, ChildError::kSetup, errno);
  }
  // A worker that is not root keeps its capabilities across setresuid: drop
  // them from every set, the ambient one included.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capset, &header, none) != 0 ||
      prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 ||
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    Fail(plan, ChildError::kSetup, errno);
  }
}

// Child runs in the vforked child and never returns.
[[noreturn]] void Child(const ChildPlan& plan) {
  // Its own session and process group, so a cancel reaches what it starts
  // too, and no process of another job can join its group (setpgid works
  // only within a session): a process that escapes its job's group cannot
  // hide in a group the leftover sweep spares.
  if (setsid() < 0) Fail(plan, ChildError::kSetup, errno);
  // Dies with the thread that spawned it, so a worker killed outright
  // (SIGKILL, the OOM killer) does not leave it running; RunExec's caller
  // blocks until the program is reaped, so that thread outlives it. The
  // job guard (job_guard.h) kills the rest of its process group.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent) _exit(127);
  // Into the job's cgroup before anything can fork.
  if (plan.cgroup_procs != nullptr) {
    const int fd = open(plan.cgroup_procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) Fail(plan, ChildError::kSetup, errno);
    close(fd);
  }
  // Default dispositions and no blocked signals: the worker blocks
  // SIGTERM/SIGINT and ignores SIGPIPE, the job must not.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo != SIGKILL && signo != SIGSTOP) {
      sigaction(signo, &default_action, nullptr);  // glibc's own: EINVAL
    }
  }
  sigset_t none;
  sigemptyset(&none);
  // NOLINTNEXTLINE(concurrency-mt-unsafe): the vforked child has one thread
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Above 2 first, so no end is overwritten by another's dup2.
  const int ends[3] = {fcntl(plan.in, F_DUPFD, 3), fcntl(plan.out, F_DUPFD, 3),
                       fcntl(plan.err, F_DUPFD, 3)};
  for (int target = 0; target < 3; ++target) {
    if (ends[target] < 0 || dup2(ends[target], target) < 0) {
      Fail(plan, ChildError::kSetup, errno);
    }
  }
  DropPrivileges(plan);
  // As the job's user, so it may only go where that user may.
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) {
    Fail(plan, ChildError::kCwd, errno);
  }
  // Exactly stdin, stdout and stderr reach the program, whatever the
  // worker inherited without close-on-exec: everything above 2 closes at
  // exec (the report pipe too, which is how the parent learns it worked).
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 65536; ++fd) {
      if (fd != plan.report) close(fd);
    }
  }
  // execvp's search, over paths the parent made: EACCES from one entry is
  // remembered while the search goes on, as execvp does.
  int error = ENOENT;
  bool denied = false;
  for (const char* path : plan.candidates) {
    execve(path, plan.argv, plan.envp);
    error = errno;
    if (error == EACCES) denied = true;
    if (error != ENOENT && error != ENOTDIR && error != EACCES &&
        error != ELOOP && error != ENAMETOOLONG) {
      break;
    }
  }
  Fail(plan, ChildError::kExec,
       denied && (error == ENOENT || error == ENOTDIR) ? EACCES : error);
}

// Candidates returns the paths execvp would try for `program`: itself when
// it has a slash, else each entry of the worker's PATH joined with it.
std::vector<std::string> Candidates(const std::string& program) {
  if (program.find('/') != std::string::npos) return {program};
  // Nothing in the worker sets variables, so getenv is safe here.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  const char* path = std::getenv("PATH");
  std::vector<std::string> paths;
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/bin:/usr/bin", ':')) {
    paths.push_back(dir.empty() ? program : absl::StrCat(dir, "/", program));
  }
  return paths;
}

// Spawn starts `spec` with the given ends as fds 0, 1 and 2 and registers
// its pid (JobPids). Returns the pid or an errno value.
// Identity is who a program runs as, where, and in which cgroup.
struct Identity {
  std::string cwd;           // "": the worker's own
  std::string cgroup_procs;  // "": none
  std::optional<JobUser> user;
  uid_t uid = 0;  // user->uid + the job's uid slot
  rlim_t nproc = 0;
  rlim_t nofile = 0;
};

std::string StartFailure(const ExecSpec& spec, const Identity& who,
                         const ChildError& failure) {
  switch (failure.step) {
    case ChildError::kCwd:
      return absl::StrCat("working directory ", EscapedForLog(who.cwd), ": ",
                          ErrnoText(failure.error));
    case ChildError::kExec:
      return absl::StrCat(EscapedForLog(spec.argv[0]), ": ",
                          ErrnoText(failure.error));
    case ChildError::kSetup:
      break;
  }
  return absl::StrCat(
      "cannot set the job up (process group, cgroup, user "
      "or limits): ",
      ErrnoText(failure.error));
}

// Spawn starts `spec` as `who` with the given ends as fds 0, 1 and 2 and
// registers its pid (JobPids). Returns the pid or why it could not start.
absl::StatusOr<pid_t> Spawn(const ExecSpec& spec, const Identity& who, int in,
                            int out, int err) {
  std::vector<char*> argv;
  for (const std::string& arg : spec.argv) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  env_strings.reserve(spec.env.size());
  for (const auto& [name, value] : spec.env) {
    env_strings.push_back(absl::StrCat(name, "=", value));
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::vector<std::string> paths = Candidates(spec.argv[0]);
  std::optional<Pipe> report = MakePipe();
  if (!report)
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  ChildPlan plan{.in = in,
                 .out = out,
                 .err = err,
                 .report = report->write.get(),
                 .cwd = who.cwd.empty() ? nullptr : who.cwd.c_str(),
                 .cgroup_procs = who.cgroup_procs.empty()
                                     ? nullptr
                                     : who.cgroup_procs.c_str(),
                 .drop = who.user.has_value(),
                 .uid = who.uid,
                 .gid = who.user ? who.user->gid : 0,
                 .nproc = who.nproc,
                 .nofile = who.nofile,
                 .argv = argv.data(),
                 .envp = envp.data(),
                 .parent = getpid()};
  for (const std::string& path : paths) plan.candidates.push_back(path.c_str());

  // Every signal stays blocked until the child has reset its handlers, so
  // none of the worker's runs in the child.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  absl::MutexLock lock(&internal::JobPids::mu);
  const pid_t pid = vfork();
  if (pid == 0) Child(plan);
  const int spawn_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("vfork: ", ErrnoText(spawn_errno)));
  }
  report->write.Reset();
  ChildError failure{};
  ssize_t n;
  while ((n = read(report->read.get(), &failure, sizeof failure)) < 0 &&
         errno == EINTR) {
  }
  if (n == sizeof failure) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return absl::FailedPreconditionError(StartFailure(spec, who, failure));
  }
  internal::JobPids::Add(pid);
  return pid;
}

// UidSlot is a job's claim on one uid of its JobUser's range, from the
// start of its program until its last process is gone.
class UidSlot {
 public:
  // Take claims the lowest free slot of `count`, or none.
  static std::optional<UidSlot> Take(int count) {
    absl::MutexLock lock(&mu_);
    std::vector<bool>& used = Used();
    if (used.size() < static_cast<size_t>(count)) used.resize(count, false);
    for (int i = 0; i < count; ++i) {
      if (!used[i]) {
        used[i] = true;
        return UidSlot(i);
      }
    }
    return std::nullopt;
  }
  UidSlot(UidSlot&& other) noexcept : index_(std::exchange(other.index_, -1)) {}
  UidSlot& operator=(UidSlot&&) = delete;
  ~UidSlot() {
    if (index_ < 0) return;
    absl::MutexLock lock(&mu_);
    Used()[index_] = false;
  }
  int index() const { return index_; }

 private:
  explicit UidSlot(int index) : index_(index) {}
  static std::vector<bool>& Used() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static auto* used = new std::vector<bool>;  // never destroyed
    return *used;
  }
  static inline absl::Mutex mu_;
  int index_;
};

// Output is one of the program's output pipes and the chunk, if any, that
// waits for the client to make room: read into ReadBuffer(stream), and
// copied only once, by Emit.
struct Output {
  OutputStream stream;
  Fd fd;
  std::string_view pending;
};

// ReadBuffer is the calling thread's buffer for reads of `stream`'s pipe,
// kOutputChunkBytes long: made once per job thread and reused by every job it
// runs, never zero-filled, so a job that prints little touches few of its
// pages. A chunk waits for the client in it (Output::pending), so each
// stream has its own.
char* ReadBuffer(OutputStream stream) {
  thread_local const std::unique_ptr<char[]> buffers[2] = {
      std::unique_ptr<char[]>(new char[kOutputChunkBytes]),
      std::unique_ptr<char[]>(new char[kOutputChunkBytes])};
  return buffers[stream == OutputStream::kStdout ? 0 : 1].get();
}

// RunningProgram is one program from its start to its reaping.
class RunningProgram {
 public:
  RunningProgram(JobContext& ctx, const ExecSpec& spec, pid_t pid,
                 std::string cgroup, Containment* containment, Fd in, Fd out,
                 Fd err)
      : ctx_(ctx),
        spec_(spec),
        pid_(pid),
        cgroup_(std::move(cgroup)),
        containment_(containment),
        pidfd_(static_cast<int>(syscall(SYS_pidfd_open, pid, 0))),
        stdin_(std::move(in)),
        outputs_{Output{OutputStream::kStdout, std::move(out), {}},
                 Output{OutputStream::kStderr, std::move(err), {}}} {
    const Duration limit = spec.time_limit;
    if (limit > Duration::zero()) {
      time_limit_at_ = std::chrono::steady_clock::now() + limit;
    }
    if (spec.stdin_data.empty() && !stdin_more_) stdin_.Reset();
    if (stdin_) {
      SetNonBlocking(stdin_.get());
      // As large as the output pipes: fewer, larger writes of a chunk.
      fcntl(stdin_.get(), F_SETPIPE_SZ, kOutputPipeBytes);
    }
    for (Output& o : outputs_) {
      SetNonBlocking(o.fd.get());
      fcntl(o.fd.get(), F_SETPIPE_SZ, kOutputPipeBytes);
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
        StopStdin();
        term_sent_ = Signal(SIGTERM);
        kill_at_ = now + ctx_.kill_grace();
      }
    }
    if (cancel_reason_ && !killed_ && now >= kill_at_) {
      kill_sent_ = Signal(SIGKILL);
      killed_ = true;
    }
  }

  // Signal sends `signo` to every process of the job: its cgroup's, or its
  // program, the program's process group and every descendant (whatever
  // group or session they moved to). Returns how many it reached.
  int Signal(int signo) {
    if (!cgroup_.empty()) {
      std::ifstream procs(cgroup_ + "/cgroup.procs");
      int reached = 0;
      for (pid_t pid; procs >> pid;) reached += kill(pid, signo) == 0;
      return reached;
    }
    int reached = 0;
    for (pid_t pid : Descendants(ProcFs(), pid_))
      reached += kill(pid, signo) == 0;
    reached += kill(pid_, signo) == 0;
    killpg(pid_, signo);
    return reached;
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
        o.pending = {};
        continue;
      }
      switch (ctx_.Emit(o.stream, o.pending, NextTimer())) {
        case JobContext::EmitResult::kTimedOut:
          return false;
        case JobContext::EmitResult::kSent:
        case JobContext::EmitResult::kDropped:
          o.pending = {};
          break;
      }
    }
    return true;
  }

  // ReadChunk reads what `o` holds, up to one chunk, into its pending chunk
  // (discarded once the job is cancelled). Returns false when nothing was
  // read: at EOF (the descriptor is then closed) or when nothing is ready.
  // Called only once the last chunk was flushed, so the buffer is free.
  bool ReadChunk(Output& o) {
    char* const buffer = ReadBuffer(o.stream);
    size_t got = 0;
    while (got < kOutputChunkBytes) {
      const ssize_t n = read(o.fd.get(), buffer + got, kOutputChunkBytes - got);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || errno != EAGAIN) o.fd.Reset();
      break;
    }
    if (got > 0 && !cancel_reason_) o.pending = std::string_view(buffer, got);
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
    // With input in hand, wait for room in the pipe; else for the next chunk
    // (and for the program closing its stdin, which poll reports as POLLERR
    // whatever the events asked for).
    const bool in_hand = !stdin_pending_.empty();
    const bool feeding = stdin_ && !cancel_reason_;
    const size_t in_at =
        feeding ? watch(stdin_.get(), in_hand ? POLLOUT : 0) : none;
    const size_t feed_at =
        feeding && !in_hand ? watch(ctx_.stdin_fd(), POLLIN) : none;
    const size_t pid_at = pidfd_ ? watch(pidfd_.get(), POLLIN) : none;
    if (!cancel_reason_) watch(ctx_.cancel_fd(), POLLIN);

    TimePoint wake = NextTimer();
    if (!pidfd_) {
      wake =
          std::min(wake, std::chrono::steady_clock::now() + kExitCheckInterval);
    }
    int timeout_ms = -1;
    if (wake != TimePoint::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          wake - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(left.count(), 0, int64_t{24} * 3600 * 1000));
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
    if (in_at != none && !in_hand && fds[in_at].revents != 0) {
      CloseStdin();  // only POLLERR wakes that
    } else if ((in_at != none && fds[in_at].revents != 0) ||
               (feed_at != none && fds[feed_at].revents != 0)) {
      WriteStdin();
    }
    if (pid_at == none || fds[pid_at].revents != 0) Reap(pid_at != none);
  }

  // WriteStdin writes what input is in hand into the program's stdin, taking
  // the next streamed chunk whenever the last is written, until the pipe is
  // full or no chunk is waiting. At the end of the input, or when the
  // program closed its stdin, the pipe is closed; a job cancelled or past
  // its time limit takes no more input either.
  void WriteStdin() {
    while (stdin_) {
      if (stdin_pending_.empty()) {
        if (!stdin_more_) return CloseStdin();  // the end of the input
        switch (ctx_.TakeStdin(stdin_chunk_)) {
          case JobContext::StdinResult::kChunk:
            stdin_pending_ = stdin_chunk_;
            continue;
          case JobContext::StdinResult::kEnd:
            stdin_more_ = false;
            continue;
          case JobContext::StdinResult::kNotYet:
            return;
        }
      }
      const ssize_t n =
          write(stdin_.get(), stdin_pending_.data(), stdin_pending_.size());
      if (n > 0) {
        stdin_pending_.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n < 0 && errno == EPIPE) {
        // The program closed its stdin: consume this thread's SIGPIPE.
        sigset_t pipe_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        const timespec zero{};
        sigtimedwait(&pipe_set, nullptr, &zero);
      }
      return CloseStdin();
    }
  }

  // CloseStdin closes the program's stdin: at the end of its input, or
  // before it (the program closed its end, or exited), which the client
  // then hears of (StopStdin).
  void CloseStdin() {
    StopStdin();
    stdin_.Reset();
  }

  // StopStdin takes no more input, telling the client if more could have
  // come (JobContext::CloseStdin). A cancelled job stops here and keeps its
  // pipe open until the program is reaped: closing it would hand the
  // program an end of file on an input cut short, and a program that
  // handles SIGTERM (or reads before it arrives) would take it for whole.
  void StopStdin() {
    stdin_pending_ = {};
    if (stdin_more_) ctx_.CloseStdin();
    stdin_more_ = false;
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
    // been reused: kill whatever it left behind, then reap it, then what
    // left the group (now re-parented to the worker) or stays in the cgroup.
    killpg(pid_, SIGKILL);
    CloseStdin();  // input still streaming in is no longer wanted
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    {
      absl::MutexLock lock(&internal::JobPids::mu);
      internal::JobPids::Remove(pid_);
    }
    if (!cgroup_.empty()) {
      left_killed_ = KillCgroup(cgroup_);
    } else if (containment_ != nullptr) {
      left_killed_ = containment_->Sweep();
    }
    if (left_killed_ > 0) {
      LogEvent(
          spdlog::level::info,
          absl::StrCat("job ", ctx_.request().job_id, ": killed ", left_killed_,
                       " processes it left behind"),
          {{"job_id", ctx_.request().job_id}, {"left_behind", left_killed_}});
    }
    exited_ = true;
  }

  JobOutcome Outcome() const {
    if (cancel_reason_) {
      const char* why = *cancel_reason_ == Failure::kTimeLimitExceeded
                            ? "time limit exceeded"
                            : "cancelled";
      std::string delivered =
          absl::StrCat(why, "; SIGTERM sent to ", Processes(term_sent_));
      if (killed_) {
        absl::StrAppend(&delivered, ", then SIGKILL to ",
                        Processes(kill_sent_));
      }
      return JobOutcome::Failed(*cancel_reason_, delivered);
    }
    if (WIFSIGNALED(status_)) return JobOutcome::Signaled(WTERMSIG(status_));
    return JobOutcome::Exited(WEXITSTATUS(status_));
  }

  static std::string Processes(int n) {
    return absl::StrCat(n, n == 1 ? " process" : " processes");
  }

  JobContext& ctx_;
  const ExecSpec& spec_;
  const pid_t pid_;
  const std::string cgroup_;        // "": none
  Containment* const containment_;  // may be null
  int term_sent_ = 0;
  int kill_sent_ = 0;
  int left_killed_ = 0;
  Fd pidfd_;
  Fd stdin_;
  // Input not yet written: the rest of the request's stdin, then of the
  // streamed chunk in stdin_chunk_ (a buffer reused for every chunk).
  std::string_view stdin_pending_ = spec_.stdin_data;
  std::string stdin_chunk_;
  bool stdin_more_ = ctx_.stdin_streamed();  // more chunks may come
  Output outputs_[2];
  TimePoint time_limit_at_ = TimePoint::max();
  std::optional<Failure> cancel_reason_;
  TimePoint kill_at_ = TimePoint::max();
  bool killed_ = false;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace

JobOutcome RunExec(JobContext& ctx, const ExecOptions& options) {
  const ExecSpec* found = FindExec(ctx.request());
  if (found == nullptr) {
    return JobOutcome::Failed(Failure::kStartFailed,
                              "no ExecSpec in the request");
  }
  const ExecSpec& spec = *found;
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

  if (!spec.cwd.empty()) {
    struct stat st;
    const std::string problem = stat(spec.cwd.c_str(), &st) != 0
                                    ? ErrnoText(errno)
                                : !S_ISDIR(st.st_mode) ? "not a directory"
                                                       : "";
    if (!problem.empty()) {
      return JobOutcome::Failed(
          Failure::kStartFailed,
          absl::StrCat("working directory ", EscapedForLog(spec.cwd), ": ",
                       problem));
    }
  }
  Identity who{.cwd = spec.cwd.empty() ? options.default_cwd : spec.cwd,
               .user = options.user,
               .nproc = options.nproc,
               .nofile = options.nofile};
  const std::optional<UidSlot> slot =
      options.user ? UidSlot::Take(options.user->uids) : std::nullopt;
  if (options.user) {
    if (!slot) {
      return JobOutcome::Failed(
          Failure::kStartFailed,
          absl::StrCat("no uid of ", options.user->name, " is free: all ",
                       options.user->uids, " are in use"));
    }
    who.uid = options.user->uid + static_cast<uid_t>(slot->index());
  }
  std::string cgroup;
  if (options.containment != nullptr) {
    absl::StatusOr<std::string> made = options.containment->JobCgroup();
    if (!made.ok()) {
      return JobOutcome::Failed(Failure::kStartFailed,
                                std::string(made.status().message()));
    }
    cgroup = *made;
    if (!cgroup.empty()) who.cgroup_procs = cgroup + "/cgroup.procs";
  }
  std::optional<Pipe> in = MakePipe(), out = MakePipe(), err = MakePipe();
  absl::StatusOr<pid_t> pid =
      in && out && err
          ? Spawn(spec, who, in->read.get(), out->write.get(), err->write.get())
          : absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  if (!pid.ok()) {
    if (!cgroup.empty()) KillCgroup(cgroup);
    return JobOutcome::Failed(Failure::kStartFailed,
                              std::string(pid.status().message()));
  }
  in->read.Reset();
  out->write.Reset();
  err->write.Reset();
  return RunningProgram(ctx, spec, *pid, cgroup, options.containment,
                        std::move(in->write), std::move(out->read),
                        std::move(err->read))
      .Wait();
}

}  // namespace cfdb::worker

// The "exec" job kind: a program started by Spawn (spawn.h), then a poll(2)
// loop over its output pipes, its stdin (StdinFeeder), its pidfd, the job's
// cancel descriptor and its timers.
#include "cfdb/worker/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/limits.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "core/text.h"
#include "exec/cgroup.h"
#include "exec/job_pids.h"
#include "exec/process_table.h"
#include "exec/spawn.h"
#include "exec/stdin_feeder.h"

namespace cfdb::worker {

namespace {

// Without a pidfd (kernels before 5.3) the loop checks on the child this
// often.
constexpr auto kExitCheckInterval = std::chrono::milliseconds(50);

using Failure = JobOutcome::Failure;
using internal::Fd;
using internal::Identity;
using internal::JobPids;
using internal::MakePipe;
using internal::Pipe;
using internal::SetNonBlocking;
using internal::Spawn;
using internal::Spawned;
using internal::StdinFeeder;

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
  RunningProgram(JobContext& ctx, const ExecSpec& spec, Spawned program,
                 std::string cgroup, Containment* containment, Fd in, Fd out,
                 Fd err)
      : ctx_(ctx),
        pid_(program.pid),
        cgroup_(std::move(cgroup)),
        containment_(containment),
        // From clone3, else made now.
        pidfd_(program.pidfd ? std::move(program.pidfd)
                             : Fd(static_cast<int>(
                                   syscall(SYS_pidfd_open, program.pid, 0)))),
        stdin_(ctx, spec.stdin_data, std::move(in)),
        outputs_{Output{OutputStream::kStdout, std::move(out), {}},
                 Output{OutputStream::kStderr, std::move(err), {}}} {
    const Duration limit = spec.time_limit;
    if (limit > Duration::zero()) {
      time_limit_at_ = std::chrono::steady_clock::now() + limit;
    }
    for (Output& o : outputs_) {
      SetNonBlocking(o.fd.get());
      fcntl(o.fd.get(), F_SETPIPE_SZ, kJobPipeBytes);
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
        stdin_.Stop();
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
    const bool in_hand = stdin_.in_hand();
    const bool feeding = stdin_.open() && !cancel_reason_;
    const size_t in_at =
        feeding ? watch(stdin_.pipe(), in_hand ? POLLOUT : 0) : none;
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
      stdin_.Close();  // only POLLERR wakes that
    } else if ((in_at != none && fds[in_at].revents != 0) ||
               (feed_at != none && fds[feed_at].revents != 0)) {
      stdin_.Write();
    }
    if (pid_at == none || fds[pid_at].revents != 0) Reap(pid_at != none);
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
    stdin_.Close();  // input still streaming in is no longer wanted
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    {
      absl::MutexLock lock(&JobPids::mu);
      JobPids::Remove(pid_);
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
  const pid_t pid_;
  const std::string cgroup_;        // "": none
  Containment* const containment_;  // may be null
  int term_sent_ = 0;
  int kill_sent_ = 0;
  int left_killed_ = 0;
  Fd pidfd_;
  StdinFeeder stdin_;
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
    who.cgroup = cgroup;
  }
  const auto start_failed = [&cgroup](std::string why) {
    if (!cgroup.empty()) KillCgroup(cgroup);
    return JobOutcome::Failed(Failure::kStartFailed, std::move(why));
  };
  std::optional<Pipe> in = MakePipe(), out = MakePipe(), err = MakePipe();
  if (!in || !out || !err) {
    return start_failed(absl::StrCat("pipe: ", ErrnoText(errno)));
  }
  absl::StatusOr<Spawned> program =
      Spawn(spec, who, in->read.get(), out->write.get(), err->write.get());
  if (!program.ok()) {
    return start_failed(std::string(program.status().message()));
  }
  ctx.Running();
  in->read.Reset();
  out->write.Reset();
  err->write.Reset();
  return RunningProgram(ctx, spec, *std::move(program), cgroup,
                        options.containment, std::move(in->write),
                        std::move(out->read), std::move(err->read))
      .Wait();
}

}  // namespace cfdb::worker

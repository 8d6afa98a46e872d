#include "exec/spawn.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "core/text.h"
#include "exec/job_pids.h"

namespace cfdb::worker::internal {

std::optional<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

namespace {

// ChildPlan is everything the child does between vfork(2) and execve(2),
// prepared by the parent: the child shares the parent's memory until it
// execs, so it may only make system calls; it allocates nothing and takes no
// lock.
struct ChildPlan {
  int in, out, err;          // become fds 0, 1 and 2
  int report;                // close-on-exec: gets a ChildError
  const char* cwd;           // nullptr: the worker's own
  const char* cgroup_procs;  // write "0" to it (vfork's way), or null
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

// Child runs in the child, on the parent's memory, and never returns.
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

#ifdef CFDB_SPAWN_CLONE3

// The child's stack: one for the process, as the spawns take turns under
// JobPids::mu and each child is off it once it has exec'd (CLONE_VFORK).
// 256 KiB under a guard page; only the pages a child touches are made.
constexpr size_t kChildStackBytes = size_t{256} * 1024;

void* ChildStack() ABSL_EXCLUSIVE_LOCKS_REQUIRED(JobPids::mu) {
  static void* stack = [] {
    const long page = sysconf(_SC_PAGESIZE);
    void* base =
        mmap(nullptr, kChildStackBytes + page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return static_cast<void*>(nullptr);
    mprotect(base, page, PROT_NONE);
    return static_cast<void*>(static_cast<char*>(base) + page);
  }();
  return stack;
}

[[noreturn]] void ChildEntry(const ChildPlan* plan) { Child(*plan); }
[[noreturn]] void ProbeEntry(const ChildPlan* /*plan*/) { _exit(0); }

// Clone3 makes the child with `args` (whose stack it runs on) and runs
// `run`(plan) in it, which must not return; returns the child's pid, or
// -errno, in the parent. In assembly, as glibc's clone is: after the
// system call the child is on a stack of its own and may not return
// through this frame.
long Clone3(clone_args* args, void (*run)(const ChildPlan*),
            const ChildPlan* plan) {
  long result = SYS_clone3;
  register void (*entry)(const ChildPlan*) asm("r12") = run;
  register const ChildPlan* child_plan asm("r13") = plan;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "ud2\n"
      "1:\n\t"
      : "+a"(result)
      : "D"(args), "S"(sizeof *args), "r"(entry), "r"(child_plan)
      : "rcx", "r11", "memory", "cc");
  return result;
}
#endif

// What a worker whose jobs start the vfork way says, and why after it.
constexpr char kVforkWay[] =
    "jobs start with vfork and join their cgroup by a write to cgroup.procs "
    "(slower): {}";

#ifdef CFDB_SPAWN_CLONE3
// clone3 until a kernel or a filter refuses it.
std::atomic<bool> clone3_works{true};

// Refuses tells whether clone3's `error` means this kernel or sandbox
// cannot do it at all (no clone3, no CLONE_INTO_CGROUP, a seccomp filter),
// as against a failure of this one spawn.
bool Refuses(int error) {
  return error == ENOSYS || error == EINVAL || error == E2BIG || error == EPERM;
}

// GiveUpClone3 turns clone3 off for good, saying so the first time.
void GiveUpClone3(int error) {
  if (!clone3_works.exchange(false, std::memory_order_relaxed)) return;
  spdlog::warn(kVforkWay,
               absl::StrCat("the kernel refused clone3 into the cgroup (",
                            ErrnoText(error), ")"));
}

// Clone3Args are the arguments of a child made by clone3 on `stack`, into
// the cgroup open at `cgroup` where it is not -1, with a pidfd into
// `*pidfd` where that is not null.
clone_args Clone3Args(void* stack, int cgroup, int* pidfd) {
  clone_args args{};
  args.flags = CLONE_VM | CLONE_VFORK | (pidfd != nullptr ? CLONE_PIDFD : 0) |
               (cgroup >= 0 ? CLONE_INTO_CGROUP : 0);
  args.pidfd = reinterpret_cast<uintptr_t>(pidfd);
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<uintptr_t>(stack);
  args.stack_size = kChildStackBytes;
  args.cgroup = cgroup >= 0 ? static_cast<uint64_t>(cgroup) : 0;
  return args;
}
#endif

// Started is what the parent learns from starting the child: its pid (or
// -1 and the errno), and its pidfd where clone3 made one.
struct Started {
  pid_t pid = -1;
  int error = 0;
  int pidfd = -1;
};

// StartChild creates the child that runs Child(plan), with every signal
// blocked: clone3 into `cgroup` where that works, else vfork with `plan`
// told to write itself into `cgroup_procs`.
Started StartChild(ChildPlan& plan, [[maybe_unused]] const Identity& who,
                   const std::string& cgroup_procs)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(JobPids::mu) {
#ifdef CFDB_SPAWN_CLONE3
  if (void* stack = ChildStack();
      stack != nullptr && clone3_works.load(std::memory_order_relaxed)) {
    Fd cgroup;
    if (!who.cgroup.empty()) {
      cgroup.Reset(
          open(who.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!cgroup) return {.error = errno};
    }
    int pidfd = -1;
    clone_args args = Clone3Args(stack, cgroup ? cgroup.get() : -1, &pidfd);
    plan.cgroup_procs = nullptr;
    const long pid = Clone3(&args, ChildEntry, &plan);
    if (pid > 0) return {.pid = static_cast<pid_t>(pid), .pidfd = pidfd};
    if (!Refuses(static_cast<int>(-pid))) {
      return {.error = static_cast<int>(-pid)};
    }
    GiveUpClone3(static_cast<int>(-pid));
  }
#endif
  plan.cgroup_procs = cgroup_procs.empty() ? nullptr : cgroup_procs.c_str();
  // vfork suspends only this thread, until the child execs or exits; the
  // child keeps to ChildPlan's rules. posix_spawn cannot drop to the job's
  // uid, set its limits and join its cgroup.
  // NOLINTNEXTLINE(bugprone-unsafe-functions)
  const pid_t pid = vfork();
  if (pid == 0) Child(plan);
  return {.pid = pid, .error = errno};
}

}  // namespace

void ProbeSpawn(const std::string& cgroup) {
#ifdef CFDB_SPAWN_CLONE3
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  {
    absl::MutexLock lock(&JobPids::mu);
    void* stack = ChildStack();
    const Fd dir(cgroup.empty() ? -1
                                : open(cgroup.c_str(),
                                       O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (stack != nullptr && clone3_works.load(std::memory_order_relaxed) &&
        (cgroup.empty() || dir)) {
      clone_args args = Clone3Args(stack, dir ? dir.get() : -1, nullptr);
      const long pid = Clone3(&args, ProbeEntry, nullptr);
      if (pid > 0) {
        while (waitpid(static_cast<pid_t>(pid), nullptr, 0) < 0 &&
               errno == EINTR) {
        }
      } else if (Refuses(static_cast<int>(-pid))) {
        GiveUpClone3(static_cast<int>(-pid));
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
#else
  (void)cgroup;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    // A property of the build, not of the host: said, not warned.
    spdlog::info(kVforkWay,
#if defined(__x86_64__)
                 "this build's sanitizer cannot follow clone3");
#else
                 "clone3 is used on x86-64 only");
#endif
  }
#endif
}

absl::StatusOr<Spawned> Spawn(const ExecSpec& spec, const Identity& who, int in,
                              int out, int err) {
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
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
  const std::string cgroup_procs =
      who.cgroup.empty() ? "" : who.cgroup + "/cgroup.procs";
  std::optional<Pipe> report = MakePipe();
  if (!report)
    return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  ChildPlan plan{.in = in,
                 .out = out,
                 .err = err,
                 .report = report->write.get(),
                 .cwd = who.cwd.empty() ? nullptr : who.cwd.c_str(),
                 .cgroup_procs = nullptr,
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
  absl::MutexLock lock(&JobPids::mu);
  const Started started = StartChild(plan, who, cgroup_procs);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  Spawned spawned{.pid = started.pid, .pidfd = Fd(started.pidfd)};
  if (spawned.pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start a process: ", ErrnoText(started.error)));
  }
  report->write.Reset();
  ChildError failure{};
  ssize_t n;
  while ((n = read(report->read.get(), &failure, sizeof failure)) < 0 &&
         errno == EINTR) {
  }
  if (n == sizeof failure) {
    while (waitpid(spawned.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return absl::FailedPreconditionError(StartFailure(spec, who, failure));
  }
  JobPids::Add(spawned.pid);
  return spawned;
}

}  // namespace cfdb::worker::internal

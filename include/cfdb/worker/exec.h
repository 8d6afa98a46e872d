// The built-in "exec" job kind: run a program directly, stream its output.
//
//   worker.RegisterKind(kExecKind, ExecKind());
//   JobRequest request{.job_id = "j1", .kind = kExecKind};
//   MutableExec(request).argv = {"sha256sum"};
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/containment.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// kExecKind is the name the daemon registers the exec kind under.
inline constexpr char kExecKind[] = "exec";

// ExecSpec is the job of the exec kind: a program started directly (no
// shell) in a session and process group of its own. It travels in
// JobRequest::spec and mirrors cfdb.worker.v1.ExecSpec.
struct ExecSpec {
  std::vector<std::string> argv;           // non-empty; argv[0] via PATH
  std::map<std::string, std::string> env;  // the whole environment
  std::string cwd;                         // empty: the worker's own
  // Written to stdin first; then stdin closes, or, for a job with streamed
  // stdin (JobContext::stdin_streamed), the streamed chunks follow.
  std::string stdin_data;
  Duration time_limit = Duration::zero();  // zero: no limit
};

// JobUser is who jobs run as. Each job running at once gets a uid of its
// own, from `uid` to `uid + uids - 1`, all with group `gid`, so that one
// job's processes can neither signal, trace nor read another's, nor use up
// its process budget.
struct JobUser {
  uid_t uid = 0;
  gid_t gid = 0;
  int uids = 1;
  std::string name;  // for messages
};

// ExecOptions is how the exec kind runs programs.
struct ExecOptions {
  // Unset: programs run as the worker. Set: as that user, with no
  // supplementary group, no capability and no_new_privs; the worker needs
  // CAP_SETUID and CAP_SETGID (and CAP_KILL to signal them).
  std::optional<JobUser> user;
  // RLIMIT_NPROC of each job's uid, so a fork loop stops at it (0: the
  // worker's own limit).
  rlim_t nproc = 0;
  // The soft RLIMIT_NOFILE of each job, within the worker's hard limit (0:
  // the worker's own). The daemon raises its own soft limit to the hard one
  // and gives jobs the soft limit it started with.
  rlim_t nofile = 0;
  // The working directory of a job whose request names none ("": the
  // worker's own).
  std::string default_cwd;
  // Not owned; must outlive every job. Null: a job's process group is
  // killed at its end, and nothing more.
  Containment* containment = nullptr;
};

// FindExec returns the request's ExecSpec, or null if it carries none.
const ExecSpec* FindExec(const JobRequest& request);
// MutableExec returns the request's ExecSpec, making an empty one first if
// it carries none (or something else).
ExecSpec& MutableExec(JobRequest& request);

// ValidateExec checks a request of the exec kind. INVALID_ARGUMENT naming
// the bad field: no ExecSpec, an empty argv, a NUL byte in argv, env or cwd,
// an env name that is empty or has '=', more than 1 MiB of argv + env (about
// what Linux takes in one exec), a negative time limit.
absl::Status ValidateExec(const JobRequest& request);

// RunExec runs the request's ExecSpec: the program starts (vfork + execve,
// no shell) in a new session and process group with the given environment,
// working directory and standard input, default signal dispositions, no blocked
// signal and no descriptor but 0, 1 and 2, as `options.user` if set, in a
// cgroup of its own where `options.containment` uses cgroups; it dies with
// the calling thread (PR_SET_PDEATHSIG), which RunExec keeps until the
// program is reaped. Its
// stdout and stderr are read as they come and passed to ctx.Emit in chunks
// of at most 1 MiB (what the pipe holds when read); while Emit blocks (the
// client reads slowly) the pipes are not read, so the program blocks too and
// the worker's memory stays bounded. Stdin is fed the same way round: the
// request's stdin_data, then each streamed chunk (JobContext::TakeStdin)
// only once the pipe has taken the last, so a program that reads slowly
// slows its client; the pipe closes at the end of the input, and a program
// that closes its stdin early is reported with JobContext::CloseStdin.
//
// Cancellation (ctx cancelled, or the time limit passed) sends SIGTERM to
// the job's processes (its cgroup's; or the program, its process group and
// its descendants), then SIGKILL after ctx.kill_grace(); the outcome says
// how many each reached. When the program exits, what is left of the job is
// killed (see containment.h); the program is always reaped. Output written
// after the program exits by a process it left is not collected.
//
// Returns Exited/Signaled when the program ended by itself; Failed with
// kStartFailed (reason from errno, e.g. "No such file or directory"),
// kCancelled or kTimeLimitExceeded otherwise. Thread-safe: each call is
// independent. Blocks SIGPIPE in the calling thread.
JobOutcome RunExec(JobContext& ctx, const ExecOptions& options = {});

// ExecKind returns the exec kind, {ValidateExec, RunExec with `options`},
// for Worker::RegisterKind.
JobKind ExecKind(ExecOptions options = {});

}  // namespace cfdb::worker

// The built-in "exec" job kind: run a program directly, stream its output.
#pragma once

#include "cfdb/worker/job.h"

namespace cfdb::worker {

// kExecKind is the name the daemon registers RunExec under.
inline constexpr char kExecKind[] = "exec";

// RunExec runs `ctx.request().exec`: the program starts (posix_spawnp, no
// shell) in a new process group with the given environment, working
// directory and standard input, and default signal dispositions. Its stdout
// and stderr are read as they come and passed to ctx.Emit in chunks of at
// most 1 MiB (what the pipe holds when read); while Emit blocks (the client
// reads slowly) the pipes are not read, so the program blocks too and the
// worker's memory stays bounded.
//
// Cancellation (ctx cancelled, or the time limit passed) sends SIGTERM to the
// process group, then SIGKILL after ctx.kill_grace(). When the program exits,
// whatever is left of its process group is killed with SIGKILL; the program
// is always reaped. Output written after the program exits by a grandchild
// that escaped the group is not collected.
//
// Returns Exited/Signaled when the program ended by itself; Failed with
// kStartFailed (reason from errno, e.g. "No such file or directory"),
// kCancelled or kTimeLimitExceeded otherwise. Thread-safe: each call is
// independent. Blocks SIGPIPE in the calling thread.
JobOutcome RunExec(JobContext& ctx);

}  // namespace cfdb::worker

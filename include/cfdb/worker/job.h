// Jobs: what a client asks a worker to run, what a job kind's handler sees
// while it runs, and how a job ends.
//
// A program that embeds the library registers its own job kinds next to the
// built-in "exec" (see worker.h and exec.h):
//
//   worker.RegisterKind("echo", {.run = [](JobContext& ctx) {
//     ctx.Emit(OutputStream::kStdout, ctx.request().payload);
//     return JobOutcome::Exited(0);
//   }});
#pragma once

#include <any>
#include <string>
#include <string_view>

#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// JobRequest is one dispatched job.
struct JobRequest {
  // The job's identity: 1..256 printable ASCII bytes, chosen by the caller.
  // A worker runs at most one job of an id while it runs or its result is
  // retained (Worker::Dispatch).
  std::string job_id;
  std::string kind;     // a registered kind, e.g. "exec"
  std::string payload;  // opaque bytes for an embedded kind
  // The request as its kind reads it, when the transport parsed one for it
  // (the exec kind's ExecSpec, see exec.h); empty otherwise.
  std::any spec;
  // How long the job runs on once no client is attached (its caller went
  // away): zero cancels it at once, as a lost caller always did; a
  // positive grace lets it run that long unattached, then cancels it; a
  // negative one lets it run without limit (its time limit and the
  // worker's stop still apply).
  Duration detach_grace = Duration::zero();
  // When the output buffer is full and nobody reads it fast enough, drop
  // the oldest unread output (counted) instead of pausing the job.
  bool drop_oldest = false;
  // Who asked: the client certificate's identity, "plaintext" or "unix
  // socket"; set by the transport, not by the client. Under mutual TLS the
  // job belongs to it (JobCaller). Kept cut at kMaxListedBytes.
  std::string client;
  // What listings show of the job: an exec job's program (argv[0]); set
  // by the transport. Kept cut at kMaxListedBytes.
  std::string program;
  // A client's request only: if a job of this id runs or is retained,
  // attach to it instead of being refused with ALREADY_EXISTS.
  bool attach_if_exists = false;
};

// What a job keeps of its request's strings for as long as it is known
// (JobRequest::client, program) and of its outcome's message: bounded, so
// that a retained result costs a few KiB whatever was asked.
inline constexpr std::size_t kMaxListedBytes = 256;
inline constexpr std::size_t kMaxOutcomeMessageBytes = 1024;

// JobCaller is who asks for a job by its id (Worker::Attach, CancelJob,
// JobsFor): a job belongs to the identity that dispatched it.
struct JobCaller {
  // The caller's identity, as JobRequest::client writes it.
  std::string identity;
  // May see and touch every job: a caller of one trust domain with the
  // worker (plaintext, the Unix socket, TLS without client certificates),
  // or an identity of the admin list (--tls-admit-admin). The default, for
  // code embedding the library.
  bool admin = true;

  // Owns says whether this caller may see and touch `request`'s job.
  bool Owns(const JobRequest& request) const {
    return admin || request.client == identity;
  }
};

enum class OutputStream { kStdout, kStderr };

// JobOutcome is how a job ended: exactly one per accepted job.
struct JobOutcome {
  enum class Kind {
    kExited,    // ran to its end; `code` is the exit code
    kSignaled,  // ran to its end, killed by signal `signal` (not by us)
    kFailed,    // see `failure`
  };
  enum class Failure {
    kNone,
    kStartFailed,        // could not start (not found, not executable, ...)
    kCancelled,          // cancelled by a stop or by the client
    kTimeLimitExceeded,  // ran past its time limit and was cancelled
    kHandlerError,       // an embedded handler reported an error
  };

  static JobOutcome Exited(int code);
  static JobOutcome Signaled(int signal);
  static JobOutcome Failed(Failure failure, std::string message);

  Kind kind = Kind::kExited;
  int code = 0;
  int signal = 0;
  Failure failure = Failure::kNone;
  // For people; a job's outcome keeps its first kMaxOutcomeMessageBytes.
  std::string message;

  // ShellStatus maps the outcome to a shell-style exit status: the code;
  // 128+N for signal N; 127 start failed; 124 time limit; 125 cancelled; 1
  // handler error.
  int ShellStatus() const;
  // ToString describes the outcome for logs and people.
  std::string ToString() const;

  friend bool operator==(const JobOutcome&, const JobOutcome&) = default;
};

// FailureName returns a stable upper-case name (e.g. "TIME_LIMIT_EXCEEDED").
std::string_view FailureName(JobOutcome::Failure failure);

// JobContext is what a job kind's handler sees while its job runs. The
// transport that dispatched the job makes it (a Job, worker.h); it lives at
// least until the handler returns. Safe to use from the handler's
// thread and from threads the handler starts and joins before returning.
class JobContext {
 public:
  virtual ~JobContext() = default;

  // request returns the dispatched job.
  virtual const JobRequest& request() const = 0;

  // cancelled returns true once the job was cancelled (a stop ran out of
  // grace, or the client went away). A handler should then end soon and
  // return JobOutcome::Failed(kCancelled, ...).
  virtual bool cancelled() const = 0;

  // cancel_fd returns a descriptor that becomes readable once the job is
  // cancelled, for handlers that wait in poll(2). Owned by the context.
  virtual int cancel_fd() const = 0;

  // kill_grace is the time between SIGTERM and SIGKILL when a process is
  // cancelled: task_kill_grace_seconds, or the grace of a Cancel call. Read
  // it once cancelled() is true.
  virtual Duration kill_grace() const = 0;

  // Running says that the job's work has begun: the exec kind calls it once
  // its program is started. A handler that does not call it is running
  // from when it is called. Ends the start latency the metrics report
  // (cfdb_worker_job_start_seconds); nothing else reads it. Thread-safe.
  virtual void Running() {}

  // EmitResult says what became of a chunk passed to Emit.
  enum class EmitResult {
    kSent,      // queued for the client
    kDropped,   // the job is cancelled or the client has gone: stop output
    kTimedOut,  // the deadline passed while the client was backed up; the
                // chunk was not sent: call again with the same chunk
  };

  // Emit sends a chunk of output to the client, byte-exact. It blocks while
  // the client's stream is backed up (flow control), so a handler producing
  // output faster than the client reads is slowed down, not buffered without
  // bound, but never past `deadline` (steady clock), so a handler can keep
  // its own timers (e.g. a time limit) while it waits.
  virtual EmitResult Emit(OutputStream stream, std::string_view data,
                          TimePoint deadline = TimePoint::max()) = 0;

  // Streamed standard input. A job dispatched with DispatchStream gets its
  // stdin from the client chunk by chunk while it runs; for any other job
  // stdin_streamed() is false, and whatever stdin it has is in its request.
  // A transport that streams stdin overrides all four.
  virtual bool stdin_streamed() const { return false; }

  // StdinResult says what TakeStdin found.
  enum class StdinResult {
    kChunk,   // `chunk` holds the next bytes (possibly none)
    kEnd,     // the client ended its input (end_of_input): no more will come
    kNotYet,  // nothing has arrived yet: wait for stdin_fd() to be readable
  };

  // TakeStdin hands over the next chunk of streamed stdin by swapping it
  // with `chunk` (so the caller's buffer is reused, not copied or freed).
  // Taking a chunk lets the client send the next one: a job that takes its
  // input only as fast as its program reads it holds at most one chunk in
  // hand, and the transport a bounded few on their way. Call from one thread at
  // a time. Without streamed stdin: kEnd.
  virtual StdinResult TakeStdin(std::string& chunk) {
    (void)chunk;
    return StdinResult::kEnd;
  }

  // stdin_fd returns a descriptor that is readable while TakeStdin would
  // return something other than kNotYet, for handlers that wait in poll(2);
  // -1 without streamed stdin. Owned by the context.
  virtual int stdin_fd() const { return -1; }

  // CloseStdin says the job will take no more of its stdin (its program
  // closed it): the client is told to stop sending, and what still arrives
  // is discarded. Idempotent; a no-op without streamed stdin.
  virtual void CloseStdin() {}
};

}  // namespace cfdb::worker

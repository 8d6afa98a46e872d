// The worker: runs dispatched jobs, tracks them in its docket, reports idle
// time, and stops with a drain grace. Knows nothing of gRPC; server.h puts it
// on the network.
//
//   Worker worker(WorkerOptions{.max_concurrent_tasks = 4});
//   worker.RegisterKind(kExecKind, ExecKind());  // the daemon does this
//   auto server = WorkerServer::Start(worker, {.address = "127.0.0.1:0"});
//   ...
//   StopSummary summary = worker.Stop(std::chrono::seconds(30));
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/docket.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/job_handle.h"
#include "cfdb/worker/job_journal.h"

namespace cfdb::worker {

class JobThreads;   // src/core/job_threads.h
class JobRegistry;  // src/core/job_registry.h

// JobHandler runs one job of a kind to its end and returns how it ended. It
// runs on a job thread (one job at a time per thread) and must return soon
// after its context is cancelled; a handler that ignores cancellation holds
// up Stop. An exception it throws ends the job with kHandlerError and the
// exception's what().
using JobHandler = std::function<JobOutcome(JobContext&)>;

// JobValidator checks a request of its kind before the job is admitted:
// INVALID_ARGUMENT naming the bad field refuses it.
using JobValidator = std::function<absl::Status(const JobRequest&)>;

// JobKind is what a registered kind does: an optional validator and the
// handler that runs its jobs.
struct JobKind {
  JobValidator validate;  // may be empty: every request is valid
  JobHandler run;
};

struct WorkerOptions {
  // At most this many jobs in flight; the next gets RESOURCE_EXHAUSTED.
  std::size_t max_concurrent_tasks = 1;
  // SIGTERM -> SIGKILL delay when a process is cancelled.
  Duration task_kill_grace = std::chrono::seconds(10);
  // Added to the nice value of the threads jobs run on, and so of the
  // processes they spawn (Linux keeps nice per thread), so that under load
  // the CPU goes to Idle, Stop and health answers first; costs a job nothing
  // while the CPU has room. 0 leaves it alone. 0..19.
  int job_nice = 10;
  // Each job's output buffer (JobJournal::Limits::buffer_bytes): output kept
  // for a client that is not attached, or comes back from an offset.
  std::size_t output_buffer_bytes = Job::kDefaultOutputBufferBytes;
  // How long a finished job's result (its outcome, and what is left of its
  // output) stays retained after it ends: to be read by Attach, to refuse
  // its id to a second job, and, for a job that ran detached, to hold off
  // an idle stop until a client has read it (RequestStopIfIdle). Zero
  // retains nothing.
  Duration result_ttl = std::chrono::minutes(5);
};

// The most finished results a worker retains at once; past it the oldest go
// first, whatever their TTL (each costs a few hundred bytes and its output).
inline constexpr std::size_t kMaxRetainedResults = 10000;

// JobCounts are a worker's jobs since it started, by how they ended.
// JobEnd is how a job ended, as the counts (and the Prometheus label
// `outcome`, docs/METRICS.md) tell them apart: one written list.
enum class JobEnd {
  kSucceeded,      // exited with code 0
  kExitedNonZero,  // exited with another code
  kSignaled,       // killed by a signal
  kStartFailed,    // could not start
  kTimedOut,       // ran past its time limit
  kHandlerError,   // an embedded handler reported an error
  kCancelled,      // cancelled by a stop or by its client
};
inline constexpr std::size_t kJobEndCount = 7;
// JobEndOf classifies `outcome`; JobEndName is its label ("succeeded",
// "exited_nonzero", "signaled", "start_failed", "timed_out",
// "handler_error", "cancelled").
JobEnd JobEndOf(const JobOutcome& outcome);
std::string_view JobEndName(JobEnd end);

struct JobCounts {
  uint64_t started = 0;    // accepted into the docket
  uint64_t succeeded = 0;  // exited with code 0
  // Exited non-zero, killed by a signal, could not start, ran past its time
  // limit, or its handler reported an error.
  uint64_t failed = 0;
  uint64_t cancelled = 0;  // cancelled by a stop or by its client
  // Jobs known by id now: in flight, or ended with the result retained.
  std::size_t known = 0;
  // Every ended job, by how it ended (JobEnd as the index); succeeded,
  // failed and cancelled are sums of these.
  std::array<uint64_t, kJobEndCount> ended{};
  // Results of detached jobs evicted before any client read them (past
  // kMaxRetainedResults; logged).
  uint64_t unread_evicted = 0;
  // Output held now by the jobs known (JobJournal::Stats::retained_bytes),
  // and every byte of output dropped so far (drop-oldest, or unread at a
  // cancel).
  uint64_t output_buffered_bytes = 0;
  uint64_t output_dropped_bytes = 0;
};

// StopState is what a worker's first stop request found, and who has asked
// to stop since, for the exit event.
struct StopState {
  // Idle() when the first request came (zero if a job was in flight).
  Duration idle_at_request = Duration::zero();
  // Jobs in flight when the first request came.
  std::size_t in_flight_at_request = 0;
  // One entry per source, in order of first arrival.
  std::vector<StopRequests::Source> sources;
  // When the drain ends at the latest, on the worker's clock
  // (TimePoint::max(): no request has a limit).
  TimePoint deadline = TimePoint::max();
};

// Worker runs jobs. Safe for concurrent access without external
// synchronization, except RegisterKind (before the first Dispatch).
class Worker {
 public:
  // `clock` measures idle time and must outlive the worker. Starts the
  // drain thread, which waits for the first stop request (std::system_error
  // if no thread can be made).
  explicit Worker(WorkerOptions options,
                  const Clock& clock = SteadyClock::Get());
  // Requests a stop with grace 0 (cancelling whatever still runs, without
  // running OnStopping callbacks), waits for the drain and joins every
  // thread.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // RegisterKind makes `name` dispatchable. INVALID_ARGUMENT for an empty
  // name or no handler; ALREADY_EXISTS if the name is registered. Call
  // before the worker is served.
  absl::Status RegisterKind(std::string name, JobKind kind);

  // Validate checks a request without running it. INVALID_ARGUMENT naming
  // the bad field: job_id (empty, > 256 bytes, not printable ASCII), an
  // unknown kind, or whatever the kind's validator refuses.
  absl::Status Validate(const JobRequest& request) const;

  // Dispatch validates `job`'s request, admits it to the docket and runs its
  // kind's handler on a job thread (a parked one, or a new one up to
  // max_concurrent_tasks): OnAccepted(), the handler; then the job leaves
  // the docket, its journal gets the outcome, and then OnOutcome() (so
  // whoever hears of its end finds its slot free; a drain ends only once
  // every OnOutcome has returned). The job stays known by its id while it
  // runs and, once ended, for result_ttl. Errors, with nothing changed:
  // INVALID_ARGUMENT (see Validate), ALREADY_EXISTS (a job of that id runs
  // or its result is retained), UNAVAILABLE (stopping), RESOURCE_EXHAUSTED
  // (docket full, or `job` has no cancel_fd because descriptors ran out).
  // A job accepted when no thread can be made ends with a START_FAILED
  // outcome rather than being dropped.
  absl::Status Dispatch(const std::shared_ptr<Job>& job);

  // Idle returns the time since the docket last became empty (zero while a
  // job is in flight). Never touches the docket's contents.
  Duration Idle() const { return docket_.Idle(); }

  // Attach adds `reader` to job `job_id`'s readers, from the byte offsets
  // `from`, as `role` (JobJournal::Attach: a controller attached before is
  // taken over; an ended job is only followed), and returns the job and
  // what the reader will find. NOT_FOUND when no job of that id runs or is
  // retained; PERMISSION_DENIED when `caller` does not own it
  // (JobCaller::Owns).
  absl::StatusOr<std::pair<std::shared_ptr<Job>, JobJournal::Attachment>>
  Attach(std::string_view job_id, const JobCaller& caller,
         const std::shared_ptr<JobReader>& reader, StreamOffsets from,
         JobJournal::Role role);

  // Jobs returns every job in flight and every retained result, oldest
  // first (by acceptance, then id).
  std::vector<std::shared_ptr<Job>> Jobs();

  // CancelJob cancels job `job_id` with `kill_grace` between SIGTERM and
  // SIGKILL (Job::CancelWithin) and returns it (Job::WhenEnded tells when
  // it has ended; a retained result has). NOT_FOUND when no job of that id
  // runs or is retained; PERMISSION_DENIED when `caller` does not own it.
  absl::StatusOr<std::shared_ptr<Job>> CancelJob(std::string_view job_id,
                                                 const JobCaller& caller,
                                                 Duration kill_grace);

  // RequestStopIfIdle is RequestStop(request) if the docket has been empty
  // for at least `idle_for` and no job that ran detached (a non-zero detach
  // grace) has a result no client has read yet; decided atomically with
  // Dispatch, so no job is accepted between the check and the docket
  // closing. FAILED_PRECONDITION otherwise, saying why (the idle time, or
  // the unread results), with nothing changed. A stop already requested
  // makes it OK (it joins the drain).
  absl::Status RequestStopIfIdle(StopRequest request, Duration idle_for);

  // RequestStop asks the worker to stop; returns at once, never fails. The
  // first request closes the docket (Dispatch then gets UNAVAILABLE), runs
  // the OnStopping callbacks on this thread and starts the drain. Every
  // request may bring the drain's deadline earlier, never later (drain.h):
  // at the deadline the jobs still in flight are cancelled, and the drain
  // ends when the docket is empty. An unset arrival means now. The drain
  // runs on the monotonic clock, on the worker's own drain thread, whatever
  // the number of requests.
  void RequestStop(StopRequest request);

  // Stop is RequestStop({"Stop()", grace}) and then WaitDrained(): it
  // refuses new jobs, lets in-flight jobs run up to `grace` (zero cancels at
  // once, negative waits without limit), cancels the rest and returns once
  // the docket is empty. Concurrent or repeated calls share one drain: the
  // earliest deadline wins, so a Stop(0) during a long drain cancels at
  // once. Blocks; never fails.
  StopSummary Stop(Duration grace);

  // WaitDrained blocks until the drain has ended (it waits for a stop to be
  // requested first) and returns its report.
  DrainReport WaitDrained();
  // WaitDrainedUntil is WaitDrained with a deadline on the monotonic clock;
  // nullopt if the deadline passed first.
  std::optional<DrainReport> WaitDrainedUntil(TimePoint deadline);

  // stopping returns true once a stop was requested.
  bool stopping() const { return docket_.closed(); }

  // stop_state returns the stop requests so far; nullopt before the first.
  std::optional<StopState> stop_state() const;

  // OnStopping adds `callback` to run (once, on the thread of the first
  // stop request) when the drain begins, e.g. to mark the health service
  // NOT_SERVING; at once, on this thread, if it has begun already. Must not
  // block or call RequestStop.
  void OnStopping(std::function<void()> callback);

  // OnDrained runs `callback` with the summary once the drain has ended: on
  // the drain thread, or at once on this thread if it already has. Must not
  // block; it may outlive whatever registered it only through what it holds.
  void OnDrained(std::function<void(const StopSummary&)> callback);

  // JobTiming is one ended job as the metrics see it: how it ended, from
  // acceptance to its work beginning (JobContext::Running) and to its end.
  struct JobTiming {
    JobEnd end = JobEnd::kSucceeded;
    Duration start = Duration::zero();
    Duration total = Duration::zero();
  };
  // OnJobEnd sets `listener` to run on the job's thread as each job ends,
  // before its end is told. Call before the worker is served; must not
  // block.
  void OnJobEnd(std::function<void(const JobTiming&)> listener) {
    on_job_end_ = std::move(listener);
  }

  // OnBusyEdge sets `listener` to run when the docket goes from empty to
  // busy and from busy to empty (Docket::OnEdge: read docket().in_flight()
  // for the state now). Call before the worker is served; must not block.
  void OnBusyEdge(std::function<void()> listener) {
    docket_.OnEdge(std::move(listener));
  }

  // counts returns the jobs so far; each field is exact, the four are read
  // one after another (a job ending meanwhile may show in one and not yet
  // in another).
  JobCounts counts() const;

  const Docket& docket() const { return docket_; }
  const WorkerOptions& options() const { return options_; }

 private:
  friend class Job;  // a detached job asks registry_ to keep its deadline
  void Run(const std::shared_ptr<Job>& job, const JobHandler* handler);
  // FindFor returns job `job_id` if `caller` owns it (Attach, CancelJob).
  absl::StatusOr<std::shared_ptr<Job>> FindFor(std::string_view job_id,
                                               const JobCaller& caller);
  // ReleaseJob takes `job` out of the docket and wakes the drain when that
  // emptied it.
  void ReleaseJob(Job* job);
  // EndJob releases `job`, then tells its journal and it its outcome.
  void EndJob(const std::shared_ptr<Job>& job, const JobOutcome& outcome);
  // Drain runs on drain_thread_: it waits for the first stop request, then
  // for the docket to empty, cancelling what is left at the deadline.
  void Drain();
  DrainReport Report() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerOptions options_;
  Docket docket_;
  absl::flat_hash_map<std::string, JobKind> kinds_;

  mutable absl::Mutex mu_;
  StopRequests requests_ ABSL_GUARDED_BY(mu_);
  std::size_t in_flight_at_stop_ ABSL_GUARDED_BY(mu_) = 0;
  Duration idle_at_stop_ ABSL_GUARDED_BY(mu_) = Duration::zero();
  std::size_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs out of the docket whose OnOutcome has not returned yet.
  int telling_ ABSL_GUARDED_BY(mu_) = 0;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  TimePoint drained_at_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> on_stopping_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const StopSummary&)>> on_drained_
      ABSL_GUARDED_BY(mu_);
  // Signalled on a new request, on the docket emptying while it drains, and
  // when the drain ends.
  CondVar changed_;

  const Clock& clock_;
  // Jobs by id, in flight and retained; cancels jobs left detached.
  std::unique_ptr<JobRegistry> registry_;

  // ~Worker joins the drain thread; then threads_, destroyed first, joins
  // every job thread before anything above goes away.
  std::thread drain_thread_;
  std::unique_ptr<JobThreads> threads_;
  std::atomic<uint64_t> jobs_started_{0};
  std::function<void(const JobTiming&)> on_job_end_;
  // Every accepted job's dropped output (JobJournal::CountDropsInto).
  std::atomic<uint64_t> output_dropped_{0};
  // Ended jobs by JobEnd, counted in EndJob.
  std::array<std::atomic<uint64_t>, kJobEndCount> ended_{};
};

}  // namespace cfdb::worker

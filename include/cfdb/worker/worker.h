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

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/docket.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/job.h"

namespace cfdb::worker {

class JobThreads;  // src/core/job_threads.h

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

// Job is one job as a transport sees it: the transport subclasses it to carry
// output and the outcome to its client, and hands it to Worker::Dispatch.
// Cancellation (flag, eventfd, kill grace) lives here. Thread-safe.
class Job : public Cancellable, public JobContext {
 public:
  Job(JobRequest request, Duration kill_grace);
  ~Job() override;

  const JobRequest& request() const override { return request_; }
  bool cancelled() const override;
  int cancel_fd() const override { return cancel_fd_; }
  Duration kill_grace() const override { return kill_grace_; }

  // Cancel marks the job cancelled, makes cancel_fd readable and calls
  // OnCancelled(). Idempotent.
  void Cancel() final;

  // OnAccepted is called once the job is in the docket, before its handler
  // starts (so before any Emit).
  virtual void OnAccepted() = 0;

  // OnOutcome is called exactly once, after the handler returned, with the
  // job still in the docket.
  virtual void OnOutcome(const JobOutcome& outcome) = 0;

 protected:
  // OnCancelled runs inside the first Cancel(), e.g. to wake a blocked Emit.
  virtual void OnCancelled() {}

 private:
  const JobRequest request_;
  const Duration kill_grace_;
  const int cancel_fd_;
  std::atomic<bool> cancelled_{false};
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
};

// JobCounts are a worker's jobs since it started, by how they ended.
struct JobCounts {
  uint64_t started = 0;    // accepted into the docket
  uint64_t succeeded = 0;  // exited with code 0
  // Exited non-zero, killed by a signal, could not start, ran past its time
  // limit, or its handler reported an error.
  uint64_t failed = 0;
  uint64_t cancelled = 0;  // cancelled by a stop or by its client
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
  // the docket, and then OnOutcome() (so whoever hears of its end finds its
  // slot free; a drain ends only once every OnOutcome has returned). Errors,
  // with the docket untouched: INVALID_ARGUMENT (see Validate), UNAVAILABLE
  // (stopping), RESOURCE_EXHAUSTED (docket full, or `job` has no cancel_fd
  // because descriptors ran out). A job accepted when no thread can be made
  // ends with a START_FAILED outcome rather than being dropped.
  absl::Status Dispatch(const std::shared_ptr<Job>& job);

  // Idle returns the time since the docket last became empty (zero while a
  // job is in flight). Never touches the docket's contents.
  Duration Idle() const { return docket_.Idle(); }

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

  // OnStopping adds `callback` to run (once, on the thread of the first
  // stop request) when the drain begins, e.g. to mark the health service
  // NOT_SERVING; at once, on this thread, if it has begun already. Must not
  // block or call RequestStop.
  void OnStopping(std::function<void()> callback);

  // OnDrained runs `callback` with the summary once the drain has ended: on
  // the drain thread, or at once on this thread if it already has. Must not
  // block; it may outlive whatever registered it only through what it holds.
  void OnDrained(std::function<void(const StopSummary&)> callback);

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
  void Run(const std::shared_ptr<Job>& job, const JobHandler* handler);
  // ReleaseJob takes `job` out of the docket and wakes the drain when that
  // emptied it.
  void ReleaseJob(Job* job);
  // EndJob releases `job`, then tells it its outcome.
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

  // ~Worker joins the drain thread; then threads_, destroyed first, joins
  // every job thread before anything above goes away.
  std::thread drain_thread_;
  std::unique_ptr<JobThreads> threads_;
  std::atomic<uint64_t> jobs_started_{0};
  std::atomic<uint64_t> jobs_succeeded_{0};
  std::atomic<uint64_t> jobs_failed_{0};
  std::atomic<uint64_t> jobs_cancelled_{0};
};

}  // namespace cfdb::worker

// Job, the handle of one job as the worker runs it: what the transports
// hold while a job runs and after it ended (job handles: attach, cancel,
// its retained result). The worker that runs it is worker.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/docket.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/job_journal.h"

namespace cfdb::worker {

class Worker;  // worker.h

// Job is one job as the worker runs it: its request, its cancellation
// (flag, eventfd, kill grace) and its journal (job_journal.h): the
// output and the outcome that clients read, a handle that outlives any one
// call. A transport makes one per dispatch (subclassing it, e.g. to stream
// stdin), hands it to Worker::Dispatch, and attaches a reader for its
// caller; a later call may attach again (Worker::Attach). Always held by a
// shared_ptr. Thread-safe.
class Job : public Cancellable,
            public JobContext,
            public std::enable_shared_from_this<Job> {
 public:
  // `output_buffer_bytes` is the journal's buffer (JobJournal::Limits).
  Job(JobRequest request, Duration kill_grace,
      std::size_t output_buffer_bytes = kDefaultOutputBufferBytes);
  ~Job() override;

  // request is the job's request. Once the handler has returned, and before
  // the outcome is told, its spec and payload are released, so read those
  // two only from the handler; a retained result keeps the rest (job_id,
  // kind, client, program, detach grace), which never change.
  const JobRequest& request() const override { return request_; }
  void Running() override;
  bool cancelled() const override;
  int cancel_fd() const override { return cancel_fd_.load(); }
  Duration kill_grace() const override;

  // Emit appends to the journal (JobJournal::Append, one copy of `data`).
  EmitResult Emit(OutputStream stream, std::string_view data,
                  TimePoint deadline) override;

  // Cancel marks the job cancelled, discards its unread output (so its
  // outcome is read next), makes cancel_fd readable and calls
  // OnCancelled(). Idempotent.
  void Cancel() final;
  // CancelWithin is Cancel with `kill_grace` between SIGTERM and SIGKILL
  // instead of the job's own (a Cancel call's grace; zero: SIGKILL at
  // once). A second call may shorten the grace a handler has not read yet.
  void CancelWithin(Duration kill_grace);

  // OnAccepted is called once the job is in the docket, before its handler
  // starts (so before any Emit). Does nothing unless overridden.
  virtual void OnAccepted() {}

  // OnOutcome is called exactly once, after the handler returned, the job
  // left the docket and its journal has the outcome. Does nothing unless
  // overridden.
  virtual void OnOutcome(const JobOutcome& outcome) { (void)outcome; }

  JobJournal& journal() { return journal_; }
  const JobJournal& journal() const { return journal_; }

  // ReaderLeft says that `reader`, a reader of the journal, is gone (its
  // call ended). The request's detach grace applies to a job that still
  // runs: zero cancels it as soon as its controller leaves (followers or
  // not); a positive grace cancels it once it has had no reader at all for
  // that long; a negative one lets it run. A job whose input was cut short
  // is cancelled by its transport, whatever the grace.
  void ReaderLeft(const JobReader* reader);

  // WhenEnded runs `callback` with the outcome once the job has ended: at
  // once, on this thread, if it has; else on the job's thread. Must not
  // block.
  void WhenEnded(std::function<void(const JobOutcome&)> callback);

  // outcome returns the outcome once the job has ended.
  std::optional<JobOutcome> outcome() const;
  // started is when the worker accepted the job, on the worker's clock and
  // on the wall clock (for people); ended, when it ended (nullopt while it
  // runs).
  TimePoint started() const { return started_; }
  std::chrono::system_clock::time_point started_wall() const {
    return started_wall_;
  }
  std::optional<TimePoint> ended() const;

  // The default JobJournal buffer, per job: 4 MiB.
  static constexpr std::size_t kDefaultOutputBufferBytes = std::size_t{4} << 20;

 protected:
  // OnCancelled runs inside the first Cancel(), e.g. to wake a blocked
  // transport.
  virtual void OnCancelled() {}

 private:
  friend class Worker;
  // End records the outcome, tells the journal and runs WhenEnded's
  // callbacks; the worker calls it once.
  void End(const JobOutcome& outcome, TimePoint now);
  // ReleaseRequest frees what the request holds that a retained result
  // does not need (spec, payload); the worker calls it once the handler
  // has returned, before End tells the outcome.
  void ReleaseRequest();

  // Not const: ReleaseRequest empties spec and payload once nothing runs
  // that reads them; the fields a retained result keeps never change.
  JobRequest request_;
  std::atomic<Duration::rep> kill_grace_;
  // An eventfd, readable once cancelled; closed (-1) when the job ends, so
  // a retained result holds no descriptor. Written and closed under mu_.
  std::atomic<int> cancel_fd_;
  std::atomic<bool> cancelled_{false};
  JobJournal journal_;
  // Set by Worker::Dispatch before the job is shared.
  class Worker* worker_ = nullptr;
  TimePoint started_{};
  // When the work began (Running, else the handler's call), in Duration
  // ticks of the steady clock; 0 before.
  std::atomic<Duration::rep> running_{0};
  std::chrono::system_clock::time_point started_wall_{};
  mutable absl::Mutex mu_;
  std::optional<JobOutcome> outcome_ ABSL_GUARDED_BY(mu_);
  std::optional<TimePoint> ended_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const JobOutcome&)>> when_ended_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cfdb::worker

// The docket: the set of jobs in flight on a worker, and the idle clock that
// the worker's `Idle` RPC reports.
//
// Idle is the time since the docket last became empty, with construction
// counting as becoming empty, and zero while any job is in flight. The idle
// timestamp moves only on the empty <-> non-empty edges; reading it never
// changes it, and an Admit that is refused leaves it alone.
//
//   Docket docket(clock, /*capacity=*/4);
//   if (absl::Status s = docket.Admit(&job); !s.ok()) return s;  // refused
//   ... run the job ...
//   docket.Release(&job);
#pragma once

#include <cstddef>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// Cancellable is a job in the docket that can be asked to stop early.
class Cancellable {
 public:
  virtual ~Cancellable() = default;
  // Cancel asks the job to end soon. Called with the docket's lock held, so
  // it must not call into the docket; safe to call more than once and from
  // any thread.
  virtual void Cancel() = 0;
};

// Docket tracks in-flight jobs and idle time. Safe for concurrent access
// without external synchronization. Does not own the jobs: a job must stay
// alive until it is released.
class Docket {
 public:
  // `clock` must outlive the docket. `capacity` >= 1 is the most jobs in
  // flight at once (max_concurrent_tasks).
  Docket(const Clock& clock, std::size_t capacity);

  // Admit adds `job` to the docket. Errors (the docket and idle clock are
  // untouched): UNAVAILABLE once Close() was called; RESOURCE_EXHAUSTED when
  // `capacity` jobs are in flight. Admitting the same pointer twice is a
  // programming error.
  absl::Status Admit(Cancellable* job);

  // Release removes `job`, admitted earlier. When it was the last one, idle
  // starts counting from now and Release returns true. Releasing an unknown
  // job does nothing (and returns false).
  bool Release(Cancellable* job);

  // Idle returns the time since the docket last became empty, or zero while
  // any job is in flight.
  Duration Idle() const;

  // in_flight returns the number of jobs in the docket.
  std::size_t in_flight() const;

  std::size_t capacity() const { return capacity_; }

  // Close refuses every later Admit with UNAVAILABLE. Idempotent.
  void Close();
  // CloseIfIdleFor closes the docket only if it has been empty for at
  // least `idle_for`, atomically with Admit (no job enters between the check
  // and the close). FAILED_PRECONDITION, saying how long it has been idle
  // (or how many jobs are in flight), with the docket left open.
  absl::Status CloseIfIdleFor(Duration idle_for);
  bool closed() const;

  // OnEdge sets `listener` (may be empty) to run after each empty -> busy
  // edge (the Admit of a first job) and busy -> empty edge (the Release of
  // the last one), on the thread that crossed it, outside the docket's
  // lock. Edges crossed by different threads at once may reach it out of
  // order, so a listener reads in_flight() for the state now rather than
  // counting calls. Call before the first Admit; the listener must not
  // block or call back into the docket's Admit or Release.
  void OnEdge(std::function<void()> listener);

  // CancelAll calls Cancel() on every job in flight and returns how many.
  std::size_t CancelAll();

  // WaitEmptyUntil blocks until the docket is empty or the monotonic clock
  // reaches `deadline` (TimePoint::max() waits without limit; a wall-clock
  // step moves neither). Returns true if the docket is empty.
  bool WaitEmptyUntil(TimePoint deadline) const;

 private:
  const Clock& clock_;
  const std::size_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<Cancellable*> jobs_ ABSL_GUARDED_BY(mu_);
  TimePoint empty_since_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  mutable CondVar emptied_;        // signalled when the last job leaves
  std::function<void()> on_edge_;  // set before the first Admit
};

}  // namespace cfdb::worker

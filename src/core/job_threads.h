// JobThreads: the reusable threads a Worker runs its jobs on.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cfdb::worker {

// JobThreads runs tasks on up to `limit` threads, made on demand and kept
// for reuse, so a job costs a handoff to a parked thread rather than a
// thread's creation and join. The caller keeps at most `limit` tasks queued
// or running (the Worker's docket does); then a task never waits behind
// another: Post makes a thread when none is parked, and at the limit one
// thread has finished its task and is about to park. Thread-safe.
class JobThreads {
 public:
  // `nice` is added to each thread's nice value when it starts (children it
  // spawns inherit it); 0 leaves it alone.
  JobThreads(std::size_t limit, int nice);
  // Runs what is queued, then joins every thread.
  ~JobThreads();
  JobThreads(const JobThreads&) = delete;
  JobThreads& operator=(const JobThreads&) = delete;

  // Post queues `task` for a parked thread, a new one, or (at the limit) the
  // thread finishing its task. Returns false, with nothing queued, when a new
  // thread was needed and the system refused it (or memory ran out).
  bool Post(std::function<void()> task);

  // threads returns how many threads exist; parked, how many of them wait
  // for a task.
  std::size_t threads() const;
  std::size_t parked() const;

 private:
  void Loop();

  const std::size_t limit_;
  const int nice_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::size_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cfdb::worker

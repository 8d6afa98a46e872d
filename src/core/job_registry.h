// JobRegistry: a worker's jobs by id, in flight and retained after their
// end, and the timer that cancels a job left without a client past its
// detach grace.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/worker.h"
#include "core/log_throttle.h"

namespace cfdb::worker {

// JobRegistry keeps a worker's jobs by id: each from its admission until
// `ttl` after its end on `clock`. Past kMaxRetainedResults ended, one goes
// for each that ends: the oldest result already read (or that no client
// waits for: a job that ran with detach grace 0) if there is one; else the
// oldest unread result of the identity that holds the most results, so
// that no identity can push another's unread results out by volume. An
// unread result evicted is logged (throttled) and counted. The output kept
// by ended jobs is bounded too: past `retained_output_bytes` in all, the
// oldest results lose theirs (their outcomes stay). Thread-safe.
class JobRegistry {
 public:
  JobRegistry(const Clock& clock, Duration ttl,
              std::size_t retained_output_bytes);
  // Joins the detach timer.
  ~JobRegistry();
  JobRegistry(const JobRegistry&) = delete;
  JobRegistry& operator=(const JobRegistry&) = delete;

  // Add adds `job` if no job of its id is known and `admit` (e.g. the
  // docket's Admit), run under the registry's lock, says OK; else returns
  // ALREADY_EXISTS or what `admit` said, with nothing added.
  absl::Status Add(const std::shared_ptr<Job>& job,
                   const std::function<absl::Status()>& admit);

  // Ended starts `job`'s retention (it has its outcome).
  void Ended(const std::shared_ptr<Job>& job);

  // Find returns the job of `job_id`, or null.
  std::shared_ptr<Job> Find(std::string_view job_id);

  // All returns every job known, oldest first.
  std::vector<std::shared_ptr<Job>> All();

  // IfNoUnreadResults runs `decide` under the registry's lock (so no job
  // is added meanwhile) when no job that ran detached (non-zero detach
  // grace) has ended with an outcome that no client read; else returns
  // FAILED_PRECONDITION naming them.
  absl::Status IfNoUnreadResults(const std::function<absl::Status()>& decide);

  // Size is how many jobs are known now (in flight or retained).
  std::size_t Size();

  // UnreadEvicted is how many unread results were evicted so far.
  uint64_t UnreadEvicted() const { return unread_evicted_.load(); }

  // CancelUnlessAttached cancels `job` at `deadline` (steady clock) if it
  // still runs with no reader attached then.
  void CancelUnlessAttached(const std::shared_ptr<Job>& job,
                            TimePoint deadline);

 private:
  // Expire forgets the results past their TTL, and evicts one for each
  // past kMaxRetainedResults.
  void Expire() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evict forgets one result past the cap, by the rule above.
  void Evict() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(const std::shared_ptr<Job>& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keep runs on keeper_: it cancels detached jobs at their deadline.
  void Keep();

  const Clock& clock_;
  const Duration ttl_;
  const std::size_t retained_output_bytes_;
  LogThrottle eviction_log_{clock_};
  std::atomic<uint64_t> unread_evicted_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Job>> ended_ ABSL_GUARDED_BY(mu_);  // by end
  // The ended jobs that still keep output, by end, with its size.
  std::deque<std::pair<std::shared_ptr<Job>, std::size_t>> with_output_
      ABSL_GUARDED_BY(mu_);
  std::size_t output_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // their sum

  struct Detached {
    std::weak_ptr<Job> job;
    TimePoint deadline;
  };
  absl::Mutex keeper_mu_;
  // By job: a job detached again has its newest deadline.
  absl::flat_hash_map<const Job*, Detached> detached_
      ABSL_GUARDED_BY(keeper_mu_);
  bool closing_ ABSL_GUARDED_BY(keeper_mu_) = false;
  CondVar keeper_changed_;
  std::thread keeper_;  // last: started once the rest is made
};

}  // namespace cfdb::worker

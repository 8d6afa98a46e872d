#include "cfdb/worker/docket.h"

#include <algorithm>

namespace cfdb::worker {

Docket::Docket(const Clock& clock, std::size_t capacity)
    : clock_(clock),
      capacity_(std::max<std::size_t>(capacity, 1)),
      empty_since_(clock.Now()) {
  // Reserved up front so Admit never allocates or rehashes.
  jobs_.reserve(capacity_);
}

absl::Status Docket::Admit(Cancellable* job) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("worker is stopping");
  if (jobs_.size() >= capacity_) {
    return absl::ResourceExhaustedError(
        "docket full: max_concurrent_tasks jobs are in flight");
  }
  jobs_.insert(job);
  return absl::OkStatus();
}

void Docket::Release(Cancellable* job) {
  absl::MutexLock lock(&mu_);
  if (jobs_.erase(job) == 1 && jobs_.empty()) empty_since_ = clock_.Now();
}

Duration Docket::Idle() const {
  absl::MutexLock lock(&mu_);
  if (!jobs_.empty()) return Duration::zero();
  return std::max(clock_.Now() - empty_since_, Duration::zero());
}

std::size_t Docket::in_flight() const {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

void Docket::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool Docket::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

std::size_t Docket::CancelAll() {
  // Under the lock, so no job can be released (and freed) while it is being
  // cancelled.
  absl::MutexLock lock(&mu_);
  for (Cancellable* job : jobs_) job->Cancel();
  return jobs_.size();
}

bool Docket::WaitEmptyUntil(TimePoint deadline) const {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return jobs_.empty();
  };
  while (!empty()) {
    const TimePoint now = std::chrono::steady_clock::now();
    if (deadline != TimePoint::max() && now >= deadline) return false;
    const auto timeout = deadline == TimePoint::max() ||
                                 deadline - now > std::chrono::hours(24)
                             ? absl::Hours(24)
                             : absl::FromChrono(deadline - now);
    mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
  }
  return true;
}

}  // namespace cfdb::worker

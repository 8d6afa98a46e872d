#include "cfdb/worker/docket.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace cfdb::worker {

Docket::Docket(const Clock& clock, std::size_t capacity)
    : clock_(clock),
      capacity_(std::max<std::size_t>(capacity, 1)),
      empty_since_(clock.Now()) {
  // Reserved up front so Admit never allocates or rehashes.
  jobs_.reserve(capacity_);
}

absl::Status Docket::Admit(Cancellable* job) {
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("worker is stopping");
    if (jobs_.size() >= capacity_) {
      return absl::ResourceExhaustedError(
          "docket full: max_concurrent_tasks jobs are in flight");
    }
    jobs_.insert(job);
    first = jobs_.size() == 1;
  }
  if (first && on_edge_) on_edge_();
  return absl::OkStatus();
}

bool Docket::Release(Cancellable* job) {
  {
    absl::MutexLock lock(&mu_);
    if (jobs_.erase(job) == 0 || !jobs_.empty()) return false;
    empty_since_ = clock_.Now();
  }
  emptied_.SignalAll();
  if (on_edge_) on_edge_();
  return true;
}

void Docket::OnEdge(std::function<void()> listener) {
  on_edge_ = std::move(listener);
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

absl::Status Docket::CloseIfIdleFor(Duration idle_for) {
  absl::MutexLock lock(&mu_);
  if (!jobs_.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "busy: %d job(s) in flight (idle 0 s, asked for %.3f s)", jobs_.size(),
        ToSeconds(idle_for)));
  }
  const Duration idle = std::max(clock_.Now() - empty_since_, Duration::zero());
  if (idle < idle_for) {
    return absl::FailedPreconditionError(
        absl::StrFormat("idle %.3f s, less than the %.3f s asked for",
                        ToSeconds(idle), ToSeconds(idle_for)));
  }
  closed_ = true;
  return absl::OkStatus();
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
  return emptied_.AwaitUntil(
      mu_, deadline,
      [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_.empty(); });
}

}  // namespace cfdb::worker

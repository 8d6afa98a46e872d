#include "serve/backoff.h"

#include <algorithm>

namespace cfdb::worker {

Backoff::Backoff(Duration initial_delay, double factor, Duration max_delay)
    : initial_(std::max(initial_delay, Duration::zero())),
      factor_(factor >= 1 ? factor : 1),
      max_(std::max(max_delay, Duration::zero())) {
  initial_ = std::min(initial_, max_);
  next_ = initial_;
}

Duration Backoff::Failed() {
  current_ = next_;
  // In double seconds, so a long run of failures saturates at the ceiling
  // instead of overflowing the integer count.
  const double next = ToSeconds(next_) * factor_;
  next_ = next >= ToSeconds(max_) ? max_ : ToDuration(Seconds(next));
  return current_;
}

void Backoff::Succeeded() {
  next_ = initial_;
  current_ = Duration::zero();
}

bool Backoff::Wait(const StopToken& stop, const Clock& clock) const {
  if (stop.stop_requested()) return false;
  if (current_ <= Duration::zero()) return true;
  return clock.WaitUntil(clock.Now() + current_, stop);
}

}  // namespace cfdb::worker

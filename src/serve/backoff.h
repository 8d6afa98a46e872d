// Backoff: an exponential retry delay whose wait ends at once on a stop.
//
//   Backoff backoff;  // 5 s, doubling, up to 15 min
//   while (!watcher.stop_requested()) {
//     if (DoSomeWork().ok()) { backoff.Succeeded(); continue; }
//     backoff.Failed();
//     if (!backoff.Wait(watcher)) break;  // a stop arrived mid-wait: leave
//   }
//
// Unlike backoffs that sleep in slices and notice a stop only at the end of
// one, Wait wakes within microseconds of the stop, however long the delay.
#pragma once

#include <chrono>

#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// Backoff is a retry schedule: initial delay, multiplied by a factor after
// each failure, up to a ceiling. Not thread-safe; one per retry loop.
class Backoff {
 public:
  static constexpr Duration kDefaultInitialDelay = std::chrono::seconds(5);
  static constexpr Duration kDefaultMaxDelay = std::chrono::minutes(15);
  static constexpr double kDefaultFactor = 2;

  // Guards: a negative delay counts as zero; an initial delay above the
  // ceiling is clamped to it; a factor below 1 (0 included) is treated as 1;
  // the delay saturates at the ceiling, never overflowing.
  explicit Backoff(Duration initial_delay = kDefaultInitialDelay,
                   double factor = kDefaultFactor,
                   Duration max_delay = kDefaultMaxDelay);

  // Failed records a failure and returns the delay that applies to it (the
  // first failure returns the initial delay), so a metric charts the real
  // schedule.
  Duration Failed();

  // Succeeded resets the schedule to the initial delay.
  void Succeeded();

  // delay returns the delay of the last failure (zero before any).
  Duration delay() const { return current_; }

  // Wait waits the last failure's delay on `clock`. Returns false if a stop
  // was requested before or during the wait (it then returns at once), true
  // when the delay passed. A zero delay returns at once without spinning.
  bool Wait(const StopToken& stop,
            const Clock& clock = SteadyClock::Get()) const;

 private:
  Duration initial_;
  double factor_;
  Duration max_;
  Duration next_;
  Duration current_ = Duration::zero();
};

}  // namespace cfdb::worker

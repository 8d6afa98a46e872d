// Monotonic time for the worker, injectable so timing policy is testable.
//
// Everything in cfdb::worker that measures an interval (idle time, lifetime,
// poll cadence) reads a Clock, never std::chrono::system_clock. Production
// code uses SteadyClock; tests use FakeClock and advance it by hand:
//
//   FakeClock clock;
//   Docket docket(clock, 4);
//   clock.Advance(std::chrono::seconds(3));
//   assert(docket.Idle() == std::chrono::seconds(3));
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cfdb::worker {

class Watcher;

// Duration and TimePoint are the worker's internal units (nanoseconds on the
// monotonic clock). Seconds is the double-valued unit used at the edges.
using Duration = std::chrono::steady_clock::duration;
using TimePoint = std::chrono::steady_clock::time_point;
using Seconds = std::chrono::duration<double>;

// ToDuration converts seconds (finite) to Duration, saturating at the
// representable range. ToSeconds converts back.
Duration ToDuration(Seconds seconds);
double ToSeconds(Duration duration);

// Clock reads monotonic time and waits on it. Implementations are safe for
// concurrent use.
class Clock {
 public:
  virtual ~Clock() = default;

  // Now returns the current monotonic time.
  virtual TimePoint Now() const = 0;

  // WaitUntil blocks until `deadline` or until `watcher` sees a stop,
  // whichever is first. Returns false if a stop was requested (before or
  // during the wait), true if the deadline was reached. Never throws.
  virtual bool WaitUntil(TimePoint deadline, const Watcher& watcher) const = 0;
};

// SteadyClock is the real clock, on std::chrono::steady_clock. A stop wakes
// WaitUntil at once.
class SteadyClock final : public Clock {
 public:
  // Get returns the process-wide instance; it lives for the whole process.
  static const SteadyClock& Get();

  TimePoint Now() const override;
  bool WaitUntil(TimePoint deadline, const Watcher& watcher) const override;
};

// FakeClock is a manual clock for tests. It starts at an arbitrary fixed
// point; WaitUntil never blocks: it jumps the clock forward to the deadline
// (never backwards) and runs the wait hook, so a policy loop that waits for
// hours finishes in microseconds.
class FakeClock final : public Clock {
 public:
  // WaitHook runs inside WaitUntil after the jump, with the deadline the
  // caller asked for (a test uses it to raise a signal "during" a wait).
  using WaitHook = std::function<void(TimePoint deadline)>;

  FakeClock();

  TimePoint Now() const override;
  bool WaitUntil(TimePoint deadline, const Watcher& watcher) const override;

  // Advance moves the clock forward by `d` (d >= 0).
  void Advance(Duration d);

  // SetWaitHook installs `hook` (may be empty). Not thread-safe against a
  // concurrent WaitUntil; set it before the code under test runs.
  void SetWaitHook(WaitHook hook);

  // waits returns how many times WaitUntil was called.
  int waits() const { return waits_.load(); }

 private:
  mutable std::atomic<Duration::rep> now_;
  mutable std::atomic<int> waits_{0};
  WaitHook hook_;
};

}  // namespace cfdb::worker

// Monotonic time for the worker, injectable so timing policy is testable.
//
// The policies read a Clock: the docket's idle time, and the serve loop's
// poll cadence, lifetime and backoff waits, and the log throttle
// (core/log_throttle.h). Production code uses SteadyClock; tests use
// FakeClock and advance it by hand. Waits that only a real process can wait
// on (flow control, a job's time limit and kill grace, the drain, ...) read
// std::chrono::steady_clock directly. Nothing measures an interval with
// std::chrono::system_clock, which is for timestamps (logs, a job's start,
// the job ids `dispatch` makes up) only.
//
//   FakeClock clock;
//   Docket docket(clock, 4);
//   clock.Advance(std::chrono::seconds(3));
//   assert(docket.Idle() == std::chrono::seconds(3));
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cfdb::worker {

// Duration and TimePoint are the worker's internal units (nanoseconds on the
// monotonic clock). Seconds is the double-valued unit used at the edges.
using Duration = std::chrono::steady_clock::duration;
using TimePoint = std::chrono::steady_clock::time_point;
using Seconds = std::chrono::duration<double>;

// ToDuration converts seconds (finite) to Duration, saturating at the
// representable range. ToSeconds converts back.
Duration ToDuration(Seconds seconds);
double ToSeconds(Duration duration);

// StopToken is what can end a Clock's wait early; a Watcher of a Shutdown
// (shutdown.h) is one. Implementations are safe for concurrent use.
class StopToken {
 public:
  virtual ~StopToken() = default;
  // stop_requested returns true once a stop was requested.
  virtual bool stop_requested() const = 0;
  // WaitUntil blocks until a stop is requested or the monotonic clock
  // reaches `deadline`. Returns false if a stop was requested, true if the
  // deadline passed.
  virtual bool WaitUntil(TimePoint deadline) const = 0;
};

// Clock reads monotonic time and waits on it. Implementations are safe for
// concurrent use.
class Clock {
 public:
  virtual ~Clock() = default;

  // Now returns the current monotonic time.
  virtual TimePoint Now() const = 0;

  // WaitUntil blocks until `deadline` or until `stop` sees a stop,
  // whichever is first. Returns false if a stop was requested (before or
  // during the wait), true if the deadline was reached. Never throws.
  virtual bool WaitUntil(TimePoint deadline, const StopToken& stop) const = 0;
};

// SteadyClock is the real clock, on std::chrono::steady_clock. A stop wakes
// WaitUntil at once.
class SteadyClock final : public Clock {
 public:
  // Get returns the process-wide instance; it lives for the whole process.
  static const SteadyClock& Get();

  TimePoint Now() const override;
  bool WaitUntil(TimePoint deadline, const StopToken& stop) const override;
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
  bool WaitUntil(TimePoint deadline, const StopToken& stop) const override;

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

// CondVar is a condition variable for absl::Mutex whose timed waits run on
// the monotonic clock. absl's own timed waits (Mutex::AwaitWithTimeout,
// CondVar::WaitWithTimeout, Notification::WaitForNotificationWithTimeout)
// end up, in Debian's abseil 20220623, as futex waits with an absolute
// CLOCK_REALTIME deadline, so a step of the wall clock stretches them or
// makes them spin. This one waits in pthread_cond_clockwait(CLOCK_MONOTONIC)
// (libstdc++'s std::condition_variable_any with steady_clock), which no
// wall-clock step can move; tests/serve/clock_step_test.cc proves it under
// libfaketime. Unlike absl::Condition it wakes only when signalled: every
// change a waiter may wait for must be followed by SignalAll(). Thread-safe.
class CondVar {
 public:
  // WaitUntil releases `mu`, which the caller holds, until SignalAll() or
  // the monotonic clock reaches `deadline` (TimePoint::max(): no deadline),
  // and holds it again before returning. Returns false if the deadline has
  // passed, true otherwise (a wakeup may be spurious: check the condition).
  bool WaitUntil(absl::Mutex& mu, TimePoint deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // AwaitUntil waits until `done()` (called with `mu` held) is true or
  // `deadline` passes, and returns its last value. (The analysis cannot
  // tell that `done` wants this very `mu`; callers are still checked.)
  template <typename Predicate>
  bool AwaitUntil(absl::Mutex& mu, TimePoint deadline, Predicate done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!done()) {
      if (!WaitUntil(mu, deadline)) return done();
    }
    return true;
  }

  // SignalAll wakes every waiter. Call it after the change, with or without
  // the mutex held.
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace cfdb::worker

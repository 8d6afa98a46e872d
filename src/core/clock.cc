#include "cfdb/worker/clock.h"

#include <cmath>

namespace cfdb::worker {

Duration ToDuration(Seconds seconds) {
  constexpr double kMax = static_cast<double>(Duration::max().count()) / 2;
  const double ns = seconds.count() * 1e9;
  if (std::isnan(ns)) return Duration::zero();
  if (ns >= kMax) return Duration(static_cast<Duration::rep>(kMax));
  if (ns <= -kMax) return Duration(static_cast<Duration::rep>(-kMax));
  return Duration(static_cast<Duration::rep>(std::llround(ns)));
}

double ToSeconds(Duration duration) {
  return std::chrono::duration_cast<Seconds>(duration).count();
}

namespace {

// MutexRef lets std::condition_variable_any release and take an absl::Mutex
// the caller holds.
struct MutexRef {
  absl::Mutex& mu;
  void lock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu.Lock(); }
  void unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu.Unlock(); }
};

// Waits are cut into pieces of at most a day, so a far deadline never
// overflows the conversion to the kernel's timespec.
constexpr Duration kLongestWait = std::chrono::hours(24);

}  // namespace

bool CondVar::WaitUntil(absl::Mutex& mu, TimePoint deadline) {
  const TimePoint now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  MutexRef ref{mu};
  const TimePoint until =
      deadline - now > kLongestWait ? now + kLongestWait : deadline;
  cv_.wait_until(ref, until);
  return std::chrono::steady_clock::now() < deadline;
}

const SteadyClock& SteadyClock::Get() {
  static const SteadyClock clock;
  return clock;
}

TimePoint SteadyClock::Now() const { return std::chrono::steady_clock::now(); }

bool SteadyClock::WaitUntil(TimePoint deadline, const StopToken& stop) const {
  return stop.WaitUntil(deadline);
}

// A fixed, non-zero origin, so a fake time is never mistaken for "unset".
FakeClock::FakeClock()
    : now_(std::chrono::hours(1000).count() * 1'000'000'000LL) {}

TimePoint FakeClock::Now() const { return TimePoint(Duration(now_.load())); }

void FakeClock::Advance(Duration d) { now_.fetch_add(d.count()); }

void FakeClock::SetWaitHook(WaitHook hook) { hook_ = std::move(hook); }

bool FakeClock::WaitUntil(TimePoint deadline, const StopToken& stop) const {
  ++waits_;
  if (stop.stop_requested()) return false;
  Duration::rep target = deadline.time_since_epoch().count();
  Duration::rep current = now_.load();
  while (current < target && !now_.compare_exchange_weak(current, target)) {
  }
  if (hook_) hook_(deadline);
  return !stop.stop_requested();
}

}  // namespace cfdb::worker

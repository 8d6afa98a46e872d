// step_waiter: ClockStepTest runs it under libfaketime, linked with the
// futex interposer the cfdb-worker binary has (src/serve/monotonic_futex.cc).
// It prints "ready", waits until its wall clock has stepped (by more than
// half an hour against the monotonic clock), then at once waits 100 ms on an
// absl::CondVar, as abseil and gRPC wait, and prints how long that took on
// the monotonic clock: "waited_ms N". It reads absl::Now() while it watches,
// as a busy process does, so abseil's extrapolated wall clock is fresh when
// the step comes and stale, by the step, right after it.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace {

double Seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// WallLessMonotonic moves only when the wall clock steps.
double WallLessMonotonic() {
  return Seconds(CLOCK_REALTIME) - Seconds(CLOCK_MONOTONIC);
}

}  // namespace

int main() {
  const double before = WallLessMonotonic();
  std::printf("ready\n");
  std::fflush(stdout);
  while (std::fabs(WallLessMonotonic() - before) < 1800) {
    (void)absl::Now();
    usleep(1000);
  }
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  const auto start = std::chrono::steady_clock::now();
  cv.WaitWithTimeout(&mu, absl::Milliseconds(100));
  const auto waited = std::chrono::steady_clock::now() - start;
  std::printf("waited_ms %lld\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(waited)
                      .count()));
  return 0;
}

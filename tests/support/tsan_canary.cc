// TSan builds only: a deliberate data race that ctest expects to fail, so
// that the annotation shim (tsan_absl.cc) is shown not to hide real races.
// Two threads increment one counter, each under a mutex of its own: the
// locking is real, the ordering is not, and TSan must report it.
#include <thread>

#include "absl/synchronization/mutex.h"

int main() {
  long counter = 0;
  absl::Mutex a, b;
  auto bump = [&counter](absl::Mutex* mu) {
    for (int i = 0; i < 100000; ++i) {
      absl::MutexLock lock(mu);
      ++counter;
    }
  };
  std::thread first(bump, &a);
  std::thread second(bump, &b);
  first.join();
  second.join();
  return counter > 0 ? 0 : 1;
}

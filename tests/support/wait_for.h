// WaitFor: wait, with a deadline, for a condition nothing can notify us of.
#pragma once

#include <chrono>
#include <thread>

namespace cfdb::worker::test_support {

// WaitFor polls `done` every 20 ms until it is true or `timeout` passes;
// returns its last value. For conditions on other processes (/proc) or
// state without a notification (a pool's parked threads, closing sockets).
template <typename Predicate>
bool WaitFor(Predicate done, std::chrono::steady_clock::duration timeout =
                                 std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace cfdb::worker::test_support

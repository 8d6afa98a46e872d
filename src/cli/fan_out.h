// FanOut: one step per worker address, a bounded number at once, each
// result handed on as soon as it is known. What `reap` and `status` over a
// fleet share.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace cfdb::worker::cli {

// FanOut runs `step` over every address of `addresses`, `concurrency` at a
// time (at least one), and hands each result to `on_result` as soon as it
// is known (so in the order the workers answer, not the order given), from
// one thread at a time. Nothing is kept per worker once handed on: memory,
// threads and open connections stay bounded by the concurrency whatever
// the number of addresses. Returns once every step is done.
template <typename Result>
void FanOut(const std::vector<std::string>& addresses, int concurrency,
            const std::function<Result(const std::string&)>& step,
            const std::function<void(const Result&)>& on_result) {
  std::atomic<size_t> next{0};
  absl::Mutex mu;  // one on_result at a time
  const size_t threads = std::clamp<size_t>(
      addresses.size(), 1, static_cast<size_t>(std::max(concurrency, 1)));
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < addresses.size();) {
        const Result result = step(addresses[i]);
        absl::MutexLock lock(&mu);
        on_result(result);
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace cfdb::worker::cli

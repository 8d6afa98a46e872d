// MemoryTrimmer gives memory the process freed back to the system, so that
// its resident size shows what it uses: glibc keeps freed heap pages (e.g.
// gRPC's buffers of a connection the worker cut, or of a burst of large
// requests) resident until malloc_trim(3) returns them.
#pragma once

#include <thread>

#include "cfdb/worker/clock.h"
#include "cfdb/worker/shutdown.h"

namespace cfdb::worker {

// kTrimEvery is how often MemoryTrimmer trims; a trim of a quiet heap
// takes microseconds.
inline constexpr Duration kTrimEvery = std::chrono::seconds(2);

// MemoryTrimmer calls malloc_trim(0) every kTrimEvery on a thread of its
// own, from construction until destruction (in an ASan build, with
// CFDB_WORKER_ASAN_PURGE set, it also purges ASan's allocator, which
// malloc_trim does not reach). Thread-safe.
class MemoryTrimmer {
 public:
  MemoryTrimmer();
  ~MemoryTrimmer();
  MemoryTrimmer(const MemoryTrimmer&) = delete;
  MemoryTrimmer& operator=(const MemoryTrimmer&) = delete;

 private:
  Shutdown stop_;
  std::thread thread_;
};

}  // namespace cfdb::worker

// MemoryTrimmer gives memory the process freed back to the system, so that
// its resident size shows what it uses: glibc keeps freed heap pages (e.g.
// gRPC's buffers of a connection the worker cut, or of a burst of large
// requests) resident until malloc_trim(3) returns them.
#pragma once

#include <thread>

#include "cfdb/worker/clock.h"
#include "cfdb/worker/shutdown.h"

namespace cfdb::worker {

// SetHeapPolicy fixes glibc's heap thresholds for a process that streams
// data through gRPC: one arena, allocations below 32 MiB from the heap, and
// free memory at the top of the heap kept up to 256 MiB between trims.
// glibc's defaults give the memory of each freed receive buffer back to the
// system and take it again for the next one: a page fault per 4 KiB
// streamed, most of the input path's CPU (docs/PERFORMANCE.md, "where the
// time goes"). What the heap keeps goes back every kTrimEvery through
// MemoryTrimmer, whose malloc_trim reaches only the main arena's top, hence
// one arena. Call it while the process has one thread (arenas are made as
// threads first contend: an arena made by an earlier thread stays); logs a
// warning if glibc refuses a setting; no effect under ASan, whose allocator
// is its own.
void SetHeapPolicy();

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

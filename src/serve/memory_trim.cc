#include "serve/memory_trim.h"

#include <malloc.h>

#include <cstdlib>

#include "spdlog/spdlog.h"

#if defined(CFDB_ASAN)
// From <sanitizer/allocator_interface.h>, which GCC does not install.
// NOLINTNEXTLINE(bugprone-reserved-identifier)
extern "C" void __sanitizer_purge_allocator();
#endif

namespace cfdb::worker {
namespace {

// glibc's largest mmap threshold (HEAP_MAX_SIZE / 2 on 64-bit): a 64 MiB
// message buffer is still mapped on its own, a 1 MiB chunk is not.
constexpr int kHeapMmapThreshold = 32 << 20;
// Free memory the heap may keep at its top between MemoryTrimmer's trims.
// Measured (docs/PERFORMANCE.md): 2 MiB keeps the faults, 4 MiB and more
// remove them; 256 MiB leaves the trim to MemoryTrimmer alone.
constexpr int kHeapTrimThreshold = 256 << 20;

// TrimHeap returns the heap's free pages to the system. Under ASan the heap
// is ASan's, which malloc_trim does not reach: it keeps freed blocks in its
// quarantine, and a size class's free pages until that class allocates
// again. Purging is its malloc_trim, but it empties the quarantine too, which
// is how ASan catches a use after free; so a sanitized daemon purges only when
// asked (CFDB_WORKER_ASAN_PURGE set, as tests that measure its memory do:
// tests/support/daemon.h).
#if defined(CFDB_ASAN)
void TrimHeap() {
  // Read once: nothing in the worker sets variables, so getenv is safe here.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  static const bool purge = std::getenv("CFDB_WORKER_ASAN_PURGE") != nullptr;
  malloc_trim(0);
  if (purge) __sanitizer_purge_allocator();
}
#else
void TrimHeap() { malloc_trim(0); }
#endif

}  // namespace

void SetHeapPolicy() {
  // Called while the process has one thread (memory_trim.h).
  // NOLINTBEGIN(concurrency-mt-unsafe)
  const bool set = mallopt(M_ARENA_MAX, 1) == 1 &&
                   mallopt(M_MMAP_THRESHOLD, kHeapMmapThreshold) == 1 &&
                   mallopt(M_TRIM_THRESHOLD, kHeapTrimThreshold) == 1;
  // NOLINTEND(concurrency-mt-unsafe)
#if !defined(CFDB_ASAN)  // ASan's mallopt sets nothing and says so
  if (!set) {
    spdlog::warn(
        "mallopt refused the heap thresholds: streamed input costs more CPU");
  }
#else
  (void)set;
#endif
}

MemoryTrimmer::MemoryTrimmer() {
  thread_ = std::thread([watcher = stop_.watcher()] {
    while (watcher.WaitUntil(SteadyClock::Get().Now() + kTrimEvery)) {
      TrimHeap();
    }
  });
}

MemoryTrimmer::~MemoryTrimmer() {
  stop_.Stop();
  thread_.join();
}

}  // namespace cfdb::worker

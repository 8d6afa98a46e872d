#include "daemon/memory_trim.h"

#include <malloc.h>

#include <cstdlib>

#if defined(CFDB_ASAN)
// From <sanitizer/allocator_interface.h>, which GCC does not install.
extern "C" void __sanitizer_purge_allocator();
#endif

namespace cfdb::worker {
namespace {

// TrimHeap returns the heap's free pages to the system. Under ASan the heap
// is ASan's, which malloc_trim does not reach: it keeps freed blocks in its
// quarantine, and a size class's free pages until that class allocates
// again. Purging is its malloc_trim, but it empties the quarantine too, which
// is how ASan catches a use after free; so a sanitized daemon purges only when
// asked (CFDB_WORKER_ASAN_PURGE set, as tests that measure its memory do:
// tests/support/daemon.h).
void TrimHeap(bool purge) {
  malloc_trim(0);
#if defined(CFDB_ASAN)
  if (purge) __sanitizer_purge_allocator();
#else
  (void)purge;
#endif
}

}  // namespace

MemoryTrimmer::MemoryTrimmer() {
  // Nothing in the worker sets variables, so getenv is safe here.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  const bool purge = std::getenv("CFDB_WORKER_ASAN_PURGE") != nullptr;
  thread_ = std::thread([watcher = stop_.watcher(), purge] {
    while (watcher.WaitUntil(SteadyClock::Get().Now() + kTrimEvery)) {
      TrimHeap(purge);
    }
  });
}

MemoryTrimmer::~MemoryTrimmer() {
  stop_.Stop();
  thread_.join();
}

}  // namespace cfdb::worker

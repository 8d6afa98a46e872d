#include "daemon/memory_trim.h"

#include <malloc.h>

#if defined(__SANITIZE_ADDRESS__)
// From <sanitizer/allocator_interface.h>, which GCC does not install.
extern "C" void __sanitizer_purge_allocator();
#endif

namespace cfdb::worker {
namespace {

// TrimHeap returns the heap's free pages to the system. Under ASan the heap
// is ASan's, which malloc_trim does not reach: it keeps freed blocks in its
// quarantine, and a size class's free pages until that class allocates
// again; purging is its malloc_trim, so that the resident size of a
// sanitized daemon means what it means in production.
void TrimHeap() {
  malloc_trim(0);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_purge_allocator();
#endif
}

}  // namespace

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

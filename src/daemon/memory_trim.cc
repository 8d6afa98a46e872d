#include "daemon/memory_trim.h"

#include <malloc.h>

namespace cfdb::worker {

MemoryTrimmer::MemoryTrimmer() {
  thread_ = std::thread([watcher = stop_.watcher()] {
    while (watcher.WaitUntil(SteadyClock::Get().Now() + kTrimEvery)) {
      malloc_trim(0);
    }
  });
}

MemoryTrimmer::~MemoryTrimmer() {
  stop_.Stop();
  thread_.join();
}

}  // namespace cfdb::worker

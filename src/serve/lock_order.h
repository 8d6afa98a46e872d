// Abseil's lock-order tracking, off in the daemon's processes.
#pragma once

namespace cfdb::worker {

// IgnoreLockOrderCycles turns off abseil's deadlock detection for the whole
// process. Debian's abseil is built without NDEBUG, so every absl::Mutex
// (under each of gRPC's locks and ours) records lock order in a global
// graph, and a cycle in it (a potential deadlock, not a real one) aborts the
// process: CPU on every lock (a tenth of `reap`'s over thousands of
// connections) and a worker that could die with jobs in flight. The ASan
// build keeps the tracking, so the whole test suite still reports lock-order
// cycles (docs/RELIABILITY.md). Call once, early; thread-safe.
void IgnoreLockOrderCycles();

}  // namespace cfdb::worker

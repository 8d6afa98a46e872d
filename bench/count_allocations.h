// Every allocation through operator new in a program linking
// count_allocations.cc is counted, so a benchmark can report how many its
// loop made. The replaced operators live in their own file so the compiler
// never sees them inlined next to their callers.
#pragma once

namespace cfdb::worker::bench {

// AllocationCount returns how many times operator new (any form) was called
// so far. Thread-safe.
long AllocationCount();

}  // namespace cfdb::worker::bench

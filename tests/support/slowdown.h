// How much a sanitizer build stretches the tests' latency bounds.
#pragma once

namespace cfdb::worker::test_support {

// kSanitizerSlowdown is how many times a latency bound is stretched in
// this build: an ASan build runs the same code several times slower, and a
// bound the docs promise of the production build is checked there as it
// is (gRPC's own tests scale their deadlines the same way:
// grpc_test_slowdown_factor).
#if defined(CFDB_ASAN)
inline constexpr int kSanitizerSlowdown = 3;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace cfdb::worker::test_support

// LogThrottle: the one rate limit of every log line a client can cause (a
// refused call, a Stop call, a connection cut for abuse, a denied call, a
// library's complaint about a request), so that no client controls the
// log's volume. Lines are grouped by kind; within a period only the first
// of a kind is logged, the rest are counted, and the count is told with the
// next line of that kind or by Flush.
//
//   LogThrottle throttle(SteadyClock::Get());
//   for (int i = 0; i < 300; ++i) {
//     throttle.Log("Stop call", spdlog::level::info, "stop rpc: draining");
//   }
//   // one line; 10 s later the next says "(and 299 more like it ...)", and
//   // Flush, at shutdown, tells what no later line did.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "core/log.h"

namespace cfdb::worker {

// kClientLogPeriod: at most one line of each kind this often.
inline constexpr Duration kClientLogPeriod = std::chrono::seconds(10);
// kMaxLogKinds bounds the kinds tracked; past it, new kinds share one
// (kOtherLogKinds), so a client inventing kinds cannot grow the map or the
// log.
inline constexpr std::size_t kMaxLogKinds = 1024;
inline constexpr std::string_view kOtherLogKinds = "(other kinds)";

// LogThrottle is safe for concurrent use. Does not take ownership of the
// clock, which must outlive it.
class LogThrottle {
 public:
  explicit LogThrottle(const Clock& clock, Duration period = kClientLogPeriod);

  // Log logs `message` with `fields` at `level` unless a line of `kind` was
  // logged less than a period ago, in which case it only counts it. A line
  // logged after some were held back says how many: " (and N more like it
  // since the last)" in the text and the field "suppressed".
  void Log(std::string_view kind, spdlog::level::level_enum level,
           std::string_view message, std::vector<LogField> fields = {});

  // Flush logs one line for each kind with lines held back that no later
  // line told, "<kind>: N more lines not logged", at the level of the last
  // held back, and forgets them.
  void Flush();

 private:
  struct Entry {
    bool logged = false;
    TimePoint last;  // when the last line of this kind was logged
    int64_t held_back = 0;
    spdlog::level::level_enum level = spdlog::level::info;
  };
  // Admit returns nullopt when a line of `kind` is held back now (and counts
  // it); otherwise how many of its kind were held back since the last one
  // logged.
  std::optional<int64_t> Admit(std::string_view kind,
                               spdlog::level::level_enum level);

  const Clock& clock_;
  const Duration period_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> kinds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cfdb::worker

#include "core/log_throttle.h"

#include "absl/strings/str_cat.h"

namespace cfdb::worker {

LogThrottle::LogThrottle(const Clock& clock, Duration period)
    : clock_(clock), period_(period) {}

std::optional<int64_t> LogThrottle::Admit(std::string_view kind,
                                          spdlog::level::level_enum level) {
  const TimePoint now = clock_.Now();
  std::string key(kind);
  absl::MutexLock lock(&mu_);
  auto it = kinds_.find(key);
  if (it == kinds_.end()) {
    if (kinds_.size() >= kMaxLogKinds) key = kOtherLogKinds;
    it = kinds_.try_emplace(key).first;
  }
  Entry& entry = it->second;
  if (entry.logged && now - entry.last < period_) {
    ++entry.held_back;
    entry.level = level;
    return std::nullopt;
  }
  const int64_t held_back = entry.held_back;
  entry = Entry{.logged = true, .last = now};
  return held_back;
}

void LogThrottle::Log(std::string_view kind, spdlog::level::level_enum level,
                      std::string_view message, std::vector<LogField> fields) {
  const std::optional<int64_t> held_back = Admit(kind, level);
  if (!held_back) return;
  if (*held_back == 0) {
    LogEvent(level, message, fields);
    return;
  }
  fields.emplace_back("suppressed", *held_back);
  LogEvent(level,
           absl::StrCat(std::string(message), " (and ", *held_back,
                        " more like it since the last)"),
           fields);
}

void LogThrottle::Flush() {
  std::vector<std::pair<std::string, Entry>> untold;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [kind, entry] : kinds_) {
      if (entry.held_back == 0) continue;
      untold.emplace_back(kind, entry);
      entry.held_back = 0;
    }
  }
  for (const auto& [kind, entry] : untold) {
    LogEvent(
        entry.level,
        absl::StrCat(kind, ": ", entry.held_back, " more lines not logged"),
        {{"suppressed", entry.held_back}, {"log_kind", kind}});
  }
}

}  // namespace cfdb::worker

// Log lines through spdlog, as text or as one JSON object per line (for
// CloudWatch), with structured fields that survive either way.
//
//   LogEvent(spdlog::level::info, "exiting",
//            {{"reason", "idle"}, {"idle_seconds", 612.5}});
//   // text: 2026-...Z info exiting (reason=idle, idle_seconds=612.5)
//   // json: {"time":"2026-...Z","level":"info","message":"exiting",
//   //        "reason":"idle","idle_seconds":612.5}
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

enum class LogFormat { kText, kJson };

// LogField is one structured field of a log line.
struct LogField {
  using Value = std::variant<std::string, double, int64_t, bool>;
  LogField(std::string_view key, std::string_view value)
      : key(key), value(std::string(value)) {}
  LogField(std::string_view key, const char* value)
      : key(key), value(std::string(value)) {}
  LogField(std::string_view key, double value) : key(key), value(value) {}
  LogField(std::string_view key, int64_t value) : key(key), value(value) {}
  LogField(std::string_view key, int value)
      : key(key), value(static_cast<int64_t>(value)) {}
  LogField(std::string_view key, std::size_t value)
      : key(key), value(static_cast<int64_t>(value)) {}
  LogField(std::string_view key, bool value) : key(key), value(value) {}

  std::string_view key;
  Value value;
};

// LogEvent logs `message` with `fields` on spdlog's default logger. Safe
// for concurrent use. Any other spdlog call still works; in JSON mode its
// text becomes the "message" field.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              std::initializer_list<LogField> fields = {});
// The same, with fields put together at run time.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              const std::vector<LogField>& fields);

// SetUpLogging makes spdlog's default logger write to stderr at `level`
// ("info", ...; INVALID_ARGUMENT otherwise) in `format`, and routes gRPC's
// own log lines into it. Call once, early, from main.
absl::Status SetUpLogging(std::string_view level, LogFormat format);

}  // namespace cfdb::worker

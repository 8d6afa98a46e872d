// Log lines with structured fields, through spdlog's default logger.
//
//   LogEvent(spdlog::level::info, "exiting",
//            {{"reason", "idle"}, {"idle_seconds", 612.5}});
//   // text: 2026-...Z info exiting (reason=idle, idle_seconds=612.5)
//
// By default the fields are appended to the message as text. A formatter
// that renders fields itself (the daemon's JSON lines, serve/logging.h)
// turns that off with SetStructuredLogging(true) and reads the fields of the
// record it formats with CurrentLogFields().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "spdlog/spdlog.h"

namespace cfdb::worker {

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
// for concurrent use.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              std::initializer_list<LogField> fields = {});
// The same, with fields put together at run time.
void LogEvent(spdlog::level::level_enum level, std::string_view message,
              const std::vector<LogField>& fields);

// SetStructuredLogging(true) leaves the fields out of the message text, for
// a formatter that renders them from CurrentLogFields(). Call once, at
// startup, with a logger whose sinks format on the calling thread.
void SetStructuredLogging(bool on);

// CurrentLogFields returns the fields of the LogEvent being logged on this
// thread (empty for any other record). For formatters only.
std::span<const LogField> CurrentLogFields();

// FieldText renders a field's value as text ("612.5", "true", ...).
std::string FieldText(const LogField::Value& value);

}  // namespace cfdb::worker

#include "core/log.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace cfdb::worker {
namespace {

std::atomic<bool> structured{false};
thread_local std::span<const LogField> current_fields;

void Log(spdlog::level::level_enum level, std::string_view message,
         std::span<const LogField> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  if (structured.load(std::memory_order_relaxed)) {
    current_fields = fields;
    logger->log(level, "{}", message);
    current_fields = {};
    return;
  }
  std::string text(message);
  const char* separator = " (";
  for (const LogField& field : fields) {
    absl::StrAppend(&text, separator, std::string(field.key), "=",
                    FieldText(field.value));
    separator = ", ";
  }
  if (!fields.empty()) text += ")";
  logger->log(level, "{}", text);
}

}  // namespace

std::string FieldText(const LogField::Value& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* d = std::get_if<double>(&value)) return absl::StrCat(*d);
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  return std::get<bool>(value) ? "true" : "false";
}

void LogEvent(spdlog::level::level_enum level, std::string_view message,
              std::initializer_list<LogField> fields) {
  Log(level, message, std::span<const LogField>(fields.begin(), fields.size()));
}

void LogEvent(spdlog::level::level_enum level, std::string_view message,
              const std::vector<LogField>& fields) {
  Log(level, message, fields);
}

void SetStructuredLogging(bool on) { structured = on; }

std::span<const LogField> CurrentLogFields() { return current_fields; }

}  // namespace cfdb::worker

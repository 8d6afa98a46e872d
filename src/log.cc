#include "cfdb/worker/log.h"

#include <atomic>
#include <span>

#include "absl/strings/str_cat.h"
#include "grpc/support/log.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace cfdb::worker {
namespace {

using Json = nlohmann::ordered_json;

// A payload that starts with this byte is a JSON object of message and
// fields made by LogEvent, for JsonFormatter to complete.
constexpr char kFieldsMarker = '\x1e';

std::atomic<bool> json_format{false};

void ToJson(Json& object, const LogField& field) {
  std::visit([&](const auto& v) { object[std::string(field.key)] = v; },
             field.value);
}

std::string ToText(const LogField::Value& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* d = std::get_if<double>(&value)) return absl::StrCat(*d);
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  return std::get<bool>(value) ? "true" : "false";
}

// JsonFormatter writes each record as one JSON object: time (UTC, ISO 8601
// with milliseconds), level, message, then LogEvent's fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    Json line;
    line["time"] = time_.Format(msg);
    line["level"] = std::string(spdlog::level::to_string_view(msg.level).data(),
                                spdlog::level::to_string_view(msg.level).size());
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (!payload.empty() && payload.front() == kFieldsMarker) {
      Json fields = Json::parse(payload.substr(1), nullptr, false);
      if (fields.is_object()) {
        for (auto& [key, value] : fields.items()) line[key] = value;
      } else {
        line["message"] = std::string(payload);
      }
    } else {
      line["message"] = std::string(payload);
    }
    // Invalid UTF-8 (e.g. a job's bytes in a message) is replaced, not fatal.
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }

 private:
  // TimeFormat renders the record's time with spdlog's own pattern code.
  class TimeFormat {
   public:
    std::string Format(const spdlog::details::log_msg& msg) {
      spdlog::memory_buf_t buffer;
      pattern_.format(msg, buffer);
      return std::string(buffer.data(), buffer.size());
    }

   private:
    spdlog::pattern_formatter pattern_{"%Y-%m-%dT%H:%M:%S.%eZ",
                                       spdlog::pattern_time_type::utc, ""};
  };
  TimeFormat time_;
};

void GrpcLog(gpr_log_func_args* args) {
  const auto level = args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::err
                     : args->severity == GPR_LOG_SEVERITY_INFO
                         ? spdlog::level::info
                         : spdlog::level::debug;
  LogEvent(level, args->message,
           {{"source", "grpc"}, {"file", args->file}, {"line", args->line}});
}

}  // namespace

namespace {

void Log(spdlog::level::level_enum level, std::string_view message,
         std::span<const LogField> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  if (json_format.load()) {
    Json object;
    object["message"] = std::string(message);
    for (const LogField& field : fields) ToJson(object, field);
    logger->log(level, "{}{}", kFieldsMarker,
                object.dump(-1, ' ', false,
                            nlohmann::json::error_handler_t::replace));
    return;
  }
  std::string text(message);
  const char* separator = " (";
  for (const LogField& field : fields) {
    absl::StrAppend(&text, separator, std::string(field.key), "=",
                    ToText(field.value));
    separator = ", ";
  }
  if (fields.size() > 0) text += ")";
  logger->log(level, "{}", text);
}

}  // namespace

void LogEvent(spdlog::level::level_enum level, std::string_view message,
              std::initializer_list<LogField> fields) {
  Log(level, message, std::span<const LogField>(fields.begin(), fields.size()));
}

void LogEvent(spdlog::level::level_enum level, std::string_view message,
              const std::vector<LogField>& fields) {
  Log(level, message, fields);
}

absl::Status SetUpLogging(std::string_view level, LogFormat format) {
  const spdlog::level::level_enum parsed =
      spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", std::string(level), "'"));
  }
  auto logger = spdlog::stderr_logger_mt("cfdb-worker");
  if (format == LogFormat::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  }
  logger->set_level(parsed);
  json_format = format == LogFormat::kJson;
  spdlog::set_default_logger(std::move(logger));
  gpr_set_log_function(GrpcLog);
  gpr_set_log_verbosity(parsed <= spdlog::level::debug ? GPR_LOG_SEVERITY_DEBUG
                        : parsed <= spdlog::level::info ? GPR_LOG_SEVERITY_INFO
                                                        : GPR_LOG_SEVERITY_ERROR);
  return absl::OkStatus();
}

}  // namespace cfdb::worker

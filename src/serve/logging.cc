#include "serve/logging.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/log.h"
#include "core/log_throttle.h"
#include "core/text.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "nlohmann/json.hpp"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

using Json = nlohmann::ordered_json;

// JsonFormatter writes each record as one JSON object: time (UTC, ISO 8601
// with milliseconds), level, message, then LogEvent's fields.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    Json line;
    line["time"] = time_.Format(msg);
    const auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string(level.data(), level.size());
    line["message"] = std::string(msg.payload.data(), msg.payload.size());
    for (const LogField& field : CurrentLogFields()) {
      std::visit([&](const auto& v) { line[std::string(field.key)] = v; },
                 field.value);
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

// TextFormatter writes each record as one line of text; control characters
// in the message are escaped (WithoutControlCharacters).
class TextFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const std::string payload = WithoutControlCharacters(
        std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg safe = msg;
    safe.payload = payload;
    pattern_.format(safe, dest);
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextFormatter>();
  }

 private:
  spdlog::pattern_formatter pattern_{"%Y-%m-%dT%H:%M:%S.%e%z %l %v"};
};

// LibraryLog is the throttle of gRPC's and protobuf's lines; never
// destroyed, as gRPC may log from its threads until the process ends.
LogThrottle& LibraryLog() {
  static auto* const throttle = new LogThrottle(SteadyClock::Get());
  return *throttle;
}

// LibraryLinesAtDebug is LogLibraryLinesAtDebug's switch.
std::atomic<bool>& LibraryLinesAtDebug() {
  static std::atomic<bool> at_debug{false};
  return at_debug;
}

// LogFromLibrary logs a line of `source` (gRPC, protobuf) from `file`:`line`
// in its code; those at warn and above through the throttle, by place.

void LogFromLibrary(spdlog::level::level_enum level, std::string_view source,
                    std::string_view message, const char* file, int line) {
  if (LibraryLinesAtDebug().load(std::memory_order_relaxed)) {
    level = std::min(level, spdlog::level::debug);
  }
  std::vector<LogField> fields = {
      {"source", source}, {"file", file}, {"line", line}};
  if (level < spdlog::level::warn) {
    LogEvent(level, message, fields);
    return;
  }
  LibraryLog().Log(absl::StrCat(std::string(source), " ", file, ":", line),
                   level, message, std::move(fields));
}

// The hook of OnGrpcAcceptFailure.
struct AcceptFailureHook {
  absl::Mutex mu;
  std::function<void()> hook ABSL_GUARDED_BY(mu);
};

AcceptFailureHook& TheAcceptFailureHook() {
  static auto* hook = new AcceptFailureHook;  // never destroyed: gRPC's
  return *hook;                               // threads may log on the way out
}

void GrpcLog(gpr_log_func_args* args) {
  // gRPC 1.51's listener stops for good after this line (tcp_server_posix):
  // the hook runs before the line may be held back by the throttle.
  if (std::string_view(args->message).starts_with("Failed accept")) {
    AcceptFailureHook& hook = TheAcceptFailureHook();
    absl::MutexLock lock(&hook.mu);
    if (hook.hook) hook.hook();
  }
  // Said in the worker's own words (WorkerServer::Start's "cannot listen").
  const bool ours = absl::StrContains(args->message, "No address added out of");
  LogFromLibrary(args->severity == GPR_LOG_SEVERITY_ERROR && !ours
                     ? spdlog::level::err
                     : spdlog::level::debug,
                 "grpc", args->message, args->file, args->line);
}

// ProtobufLog routes protobuf's own complaints (e.g. a request string that
// is not UTF-8) into the log, so JSON stays one object per line.
void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  LogFromLibrary(level >= google::protobuf::LOGLEVEL_ERROR
                     ? spdlog::level::warn
                     : spdlog::level::debug,
                 "protobuf", EscapedForLog(message), file, line);
}

// The raw logger writes lines as they are, to stderr like the default
// logger; set with JSON logs only.
std::shared_ptr<spdlog::logger>& RawLogger() {
  static std::shared_ptr<spdlog::logger> raw;
  return raw;
}

}  // namespace

void LogLibraryLinesAtDebug() {
  LibraryLinesAtDebug().store(true, std::memory_order_relaxed);
}

void FlushLibraryLog() { LibraryLog().Flush(); }

void OnGrpcAcceptFailure(std::function<void()> hook) {
  AcceptFailureHook& the_hook = TheAcceptFailureHook();
  absl::MutexLock lock(&the_hook.mu);
  the_hook.hook = std::move(hook);
}

void WriteJsonLogLine(const std::string& line) {
  if (const auto& raw = RawLogger()) raw->info(line);
}

bool JsonLogs() { return RawLogger() != nullptr; }

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
    // A sink of its own (a sink holds its formatter); each line is one
    // fwrite of stderr, which stdio never interleaves with another.
    auto raw = std::make_shared<spdlog::logger>(
        "cfdb-worker-raw", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    raw->set_pattern("%v");
    RawLogger() = std::move(raw);
  } else {
    logger->set_formatter(std::make_unique<TextFormatter>());
  }
  logger->set_level(parsed);
  SetStructuredLogging(format == LogFormat::kJson);
  spdlog::set_default_logger(std::move(logger));
  gpr_set_log_function(GrpcLog);
  google::protobuf::SetLogHandler(ProtobufLog);
  gpr_set_log_verbosity(parsed <= spdlog::level::debug
                            ? GPR_LOG_SEVERITY_DEBUG
                            : GPR_LOG_SEVERITY_ERROR);
  return absl::OkStatus();
}

}  // namespace cfdb::worker

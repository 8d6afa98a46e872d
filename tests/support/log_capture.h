// LogCapture: spdlog's default logger writes into a string for as long as
// the capture lives, then the previous default logger is back. The one way a
// test reads what the code logged: a logger left writing into a test's
// stream outlives the test and writes into freed memory when the next test
// of the same process logs (seen under ASan with whole-binary runs).
// Not thread-safe to construct or destroy while other threads log.
#pragma once

#include <memory>
#include <sstream>
#include <string>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::test_support {

class LogCapture {
 public:
  // Lines are "<level> <message>"; `level` is the lowest level kept.
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::info)
      : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_pattern("%l %v");
    logger->set_level(level);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // What was logged so far.
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace cfdb::worker::test_support

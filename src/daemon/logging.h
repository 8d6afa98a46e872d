// The daemon's logging: spdlog's default logger on stderr, as text or as one
// JSON object per line (for CloudWatch), with gRPC's own log lines routed
// into it.
//
//   text: 2026-...Z info exiting (reason=idle, idle_seconds=612.5)
//   json: {"time":"2026-...Z","level":"info","message":"exiting",
//          "reason":"idle","idle_seconds":612.5}
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cfdb::worker {

enum class LogFormat { kText, kJson };

// SetUpLogging makes spdlog's default logger write to stderr at `level`
// ("info", ...; INVALID_ARGUMENT otherwise) in `format`, and routes gRPC's
// own log lines into it: its errors as errors, its INFO lines at debug (they
// are internals: "grpc epoll fd: 5", ...). Call once, early, from main.
absl::Status SetUpLogging(std::string_view level, LogFormat format);

// WriteJsonLogLine writes `line`, a whole JSON object, as one line of the
// JSON log, whatever the log level (e.g. an EMF metrics line). Does nothing
// with text logs. Thread-safe.
void WriteJsonLogLine(const std::string& line);
// JsonLogs says whether the log is JSON (SetUpLogging with kJson).
bool JsonLogs();

}  // namespace cfdb::worker

// The daemon's logging: spdlog's default logger on stderr, as text or as one
// JSON object per line (for CloudWatch), with gRPC's own log lines routed
// into it.
//
//   text: 2026-...Z info exiting (reason=idle, idle_seconds=612.5)
//   json: {"time":"2026-...Z","level":"info","message":"exiting",
//          "reason":"idle","idle_seconds":612.5}
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cfdb/worker/serve_config.h"

namespace cfdb::worker {

// SetUpLogging makes spdlog's default logger write to stderr at `level`
// ("info", ...; INVALID_ARGUMENT otherwise) in `format`, and routes gRPC's
// own log lines into it: its errors as errors, its INFO lines at debug (they
// are internals: "grpc epoll fd: 5", ...). Their errors, and protobuf's
// complaints, which a client causes (a plaintext or unknown peer's failed
// handshake, a request that is not UTF-8), go through a LogThrottle: one
// line per place in their code per period, with a count. Call once, early,
// from main.
// gRPC's "No address added out of total N resolved" goes to debug: the
// worker says why it cannot listen in its own words (WorkerServer::Start).
absl::Status SetUpLogging(std::string_view level, LogFormat format);

// LogLibraryLinesAtDebug sends gRPC's and protobuf's own lines to debug
// whatever their severity: a client command's failure is one line that
// carries gRPC's message already (the CLI's Fail), and a second, raw copy
// ("Handshake failed with fatal error SSL_ERROR_SSL ...") only confuses.
// Call after SetUpLogging. Thread-safe.
void LogLibraryLinesAtDebug();

// FlushLibraryLog tells how many of gRPC's and protobuf's lines the throttle
// held back that no later line told (LogThrottle::Flush). Call at exit.
void FlushLibraryLog();

// OnGrpcAcceptFailure sets `hook` (empty: none) to run whenever gRPC logs
// that its listener could not accept a connection ("Failed accept4: Too
// many open files"): gRPC 1.51 then never accepts on that listener again.
// It runs on gRPC's thread and must not block; setting it waits for a call
// in progress. Thread-safe.
void OnGrpcAcceptFailure(std::function<void()> hook);

// WriteJsonLogLine writes `line`, a whole JSON object, as one line of the
// JSON log, whatever the log level (e.g. an EMF metrics line). Does nothing
// with text logs. Thread-safe.
void WriteJsonLogLine(const std::string& line);
// JsonLogs says whether the log is JSON (SetUpLogging with kJson).
bool JsonLogs();

}  // namespace cfdb::worker

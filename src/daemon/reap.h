// `cfdb-worker reap`: the pool side of retirement. Polls many workers at
// once, stops those idle at or past a threshold with a drain grace, and
// says what it did with each.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cfdb/worker/drain.h"
#include "cfdb/worker/errors.h"
#include "daemon/commands.h"

namespace cfdb::worker::cli {

struct ReapOptions {
  // Deadline of each Idle call (`timeout`), retries and credentials; the
  // address is unused.
  ClientOptions client;
  std::vector<std::string> addresses;
  double idle_threshold_seconds = 0;
  // Drain grace of each Stop: a job that arrives between the poll and the
  // stop still gets this long.
  double grace_seconds = 60;
  bool dry_run = false;
  bool json = false;
  int concurrency = 64;  // workers polled at once, >= 1
};

// What reap did with one worker.
enum class ReapAction {
  kStopped,     // idle at or past the threshold: stopped
  kDryRun,      // would have been stopped
  kKeptBusy,    // a job in flight (idle 0)
  kKeptBelow,   // idle, below the threshold
  kSkipped,     // idle unavailable: the worker predates the Idle RPC
  kPollFailed,  // the Idle call failed (`error` says how)
  kStopFailed,  // idle past the threshold, but the Stop call failed
};

// ReapActionName returns "stopped", "dry-run", "kept busy", "kept below
// threshold", "skipped", "poll failed" or "stop failed".
std::string_view ReapActionName(ReapAction action);

struct ReapResult {
  std::string address;
  ReapAction action = ReapAction::kPollFailed;
  std::optional<double> idle_seconds;
  std::optional<StopSummary> stopped;
  // The failed call's kind and status, for kSkipped, kPollFailed and
  // kStopFailed.
  std::optional<ErrorKind> error_kind;
  absl::Status status;
};

// ReapOne polls one worker and acts on it. Thread-safe.
ReapResult ReapOne(const ReapOptions& options, const std::string& address);

// Reap polls every worker, `concurrency` at a time, and returns the
// results in the order of `options.addresses`.
std::vector<ReapResult> Reap(const ReapOptions& options);

// FormatResult renders one result as a line of text or one JSON object.
std::string FormatResult(const ReapResult& result, bool json);

// RunReap reaps, prints one line per worker and returns the exit code: 0
// when every worker was polled (and, past the threshold, stopped), 1 when
// any poll or stop failed; an idle-unavailable worker is skipped, not a
// failure.
int RunReap(const ReapOptions& options);

}  // namespace cfdb::worker::cli

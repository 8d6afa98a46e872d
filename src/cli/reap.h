// `cfdb-worker reap`: the pool side of retirement. Polls many workers at
// once, stops those idle at or past a threshold with a drain grace, and
// says what it did with each.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cfdb/worker/drain.h"
#include "cfdb/worker/errors.h"
#include "cli/commands.h"

namespace cfdb::worker::cli {

struct ReapOptions {
  // Deadline of each Idle call (`timeout`), retries and credentials; the
  // address is unused.
  ClientOptions client;
  std::vector<std::string> addresses;
  double idle_threshold_seconds = 0;
  // Drain grace of each Stop. The stop is conditional, so no job accepted
  // after the poll is drained by it; a worker that predates conditional
  // stops stops whatever it runs, draining for this long.
  double grace_seconds = 60;
  bool dry_run = false;
  bool json = false;
  int concurrency = 64;  // workers polled at once, >= 1
};

// What reap did with one worker.
enum class ReapAction {
  kStopped,    // idle at or past the threshold: stopped
  kDryRun,     // would have been stopped
  kKeptBusy,   // a job in flight (idle 0)
  kKeptBelow,  // idle, below the threshold
  // Idle past the threshold when polled, but a job came (or a detached
  // job's result waits to be read) before the stop: the worker refused the
  // conditional stop and keeps serving. A race reap lost, harmlessly.
  kKeptBecameBusy,
  kSkipped,     // idle unavailable: the worker predates the Idle RPC
  kPollFailed,  // the Idle call failed (`error` says how)
  kStopFailed,  // idle past the threshold, but the Stop call failed
};

// ReapActionName returns "stopped", "dry-run", "kept busy", "kept below
// threshold", "kept: became busy", "skipped", "poll failed" or "stop
// failed".
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

// ReapOne is the per-worker step: it polls one worker, decides, and stops
// it if the decision says so, over a connection of its own that is closed
// when it returns. The stop is conditional (StopRequest.if_idle_for_seconds
// = the threshold): the worker decides again, atomically with admission,
// so a job dispatched between the poll and the stop keeps its worker
// (kKeptBecameBusy) rather than being drained or cancelled. Thread-safe.
ReapResult ReapOne(const ReapOptions& options, const std::string& address);

// ReapStep is what Reap does with one worker: ReapOne in `cfdb-worker
// reap`.
using ReapStep = std::function<ReapResult(const std::string& address)>;

// Reap runs `step` over every address of `options`, `concurrency` at a
// time, and hands each result to `on_result` as soon as it is known (so in
// the order the workers answer, not the order given), from one thread at a
// time. Nothing is kept per worker once handed on: memory stays bounded by
// the concurrency whatever the number of addresses, and so do the open
// connections (ReapOne holds one). Returns once every worker is done.
void Reap(const ReapOptions& options, const ReapStep& step,
          const std::function<void(const ReapResult&)>& on_result);

// FormatResult renders one result as a line of text or one JSON object.
std::string FormatResult(const ReapResult& result, bool json);

// RunReap reaps, prints one line per worker as it is done (flushed at
// once, so a consumer sees each result without waiting for the slowest
// stop) and returns the exit code: 0 when every worker was polled (and,
// past the threshold, stopped), 1 when any poll or stop failed; an
// idle-unavailable worker is skipped, not a failure.
int RunReap(const ReapOptions& options);

}  // namespace cfdb::worker::cli

#include "cli/reap.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/cli_flags.h"
#include "cli/client_calls.h"
#include "cli/fan_out.h"
#include "nlohmann/json.hpp"
#include "serve/lock_order.h"

namespace cfdb::worker::cli {
namespace {

// A failure of `rpc` on `result`: its kind and status, explained.
ReapResult Failed(ReapResult result, const ReapOptions& options, Rpc rpc,
                  ReapAction action, const absl::Status& status) {
  result.action = action;
  result.status = Explained(rpc, result.address, options.client, status);
  result.error_kind = ClassifyError(rpc, result.status);
  return result;
}

}  // namespace

std::string_view ReapActionName(ReapAction action) {
  switch (action) {
    case ReapAction::kStopped:
      return "stopped";
    case ReapAction::kDryRun:
      return "dry-run";
    case ReapAction::kKeptBusy:
      return "kept busy";
    case ReapAction::kKeptBelow:
      return "kept below threshold";
    case ReapAction::kKeptBecameBusy:
      return "kept: became busy";
    case ReapAction::kSkipped:
      return "skipped";
    case ReapAction::kPollFailed:
      return "poll failed";
    case ReapAction::kStopFailed:
      return "stop failed";
  }
  return "poll failed";
}

ReapResult ReapOne(const ReapOptions& options, const std::string& address) {
  ReapResult result{.address = address};
  auto connection = Connect(address, options.client);
  if (!connection.ok()) {
    return Failed(result, options, Rpc::kIdle, ReapAction::kPollFailed,
                  connection.status());
  }
  absl::StatusOr<double> idle = WithRetries(
      options.client.attempts, Rpc::kIdle,
      [&] { return (*connection)->IdleTime(options.client.timeout); });
  if (!idle.ok()) {
    const bool unavailable =
        ClassifyError(Rpc::kIdle, idle.status()) == ErrorKind::kIdleUnavailable;
    return Failed(result, options, Rpc::kIdle,
                  unavailable ? ReapAction::kSkipped : ReapAction::kPollFailed,
                  idle.status());
  }
  result.idle_seconds = *idle;
  if (*idle <= 0) {
    result.action = ReapAction::kKeptBusy;
  } else if (*idle < options.idle_threshold_seconds) {
    result.action = ReapAction::kKeptBelow;
  } else if (options.dry_run) {
    result.action = ReapAction::kDryRun;
  } else {
    const Duration grace = GraceFromSeconds(options.grace_seconds);
    const Duration if_idle_for =
        ToDuration(Seconds(options.idle_threshold_seconds));
    absl::StatusOr<StopSummary> stopped =
        WithRetries(options.client.attempts, Rpc::kStop, [&] {
          return (*connection)
              ->Stop(grace, StopDeadline(options.grace_seconds), if_idle_for);
        });
    if (!stopped.ok() &&
        ClassifyError(Rpc::kStop, stopped.status()) == ErrorKind::kStillBusy) {
      result.action = ReapAction::kKeptBecameBusy;
      result.status = stopped.status();
      return result;
    }
    if (!stopped.ok()) {
      return Failed(result, options, Rpc::kStop, ReapAction::kStopFailed,
                    stopped.status());
    }
    result.action = ReapAction::kStopped;
    result.stopped = *stopped;
  }
  return result;
}

void Reap(const ReapOptions& options, const ReapStep& step,
          const std::function<void(const ReapResult&)>& on_result) {
  FanOut<ReapResult>(options.addresses, options.concurrency, step, on_result);
}

std::string FormatResult(const ReapResult& r, bool json) {
  if (json) {
    nlohmann::ordered_json line;
    line["address"] = r.address;
    line["action"] = std::string(ReapActionName(r.action));
    if (r.idle_seconds) line["idle_seconds"] = *r.idle_seconds;
    if (r.stopped) {
      line["drained"] = r.stopped->drained;
      line["cancelled"] = r.stopped->cancelled;
    }
    if (r.error_kind) {
      line["error_kind"] = std::string(ErrorKindName(*r.error_kind));
      line["grpc_code"] = absl::StatusCodeToString(r.status.code());
    }
    if (!r.status.ok()) line["message"] = std::string(r.status.message());
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string text =
      absl::StrCat(r.address, " ", std::string(ReapActionName(r.action)));
  if (r.idle_seconds)
    absl::StrAppendFormat(&text, " idle=%.3f", *r.idle_seconds);
  if (r.stopped) {
    absl::StrAppend(&text, " drained=", r.stopped->drained,
                    " cancelled=", r.stopped->cancelled);
  }
  if (r.error_kind) {
    absl::StrAppend(&text, ": ", std::string(ErrorKindName(*r.error_kind)),
                    " (", absl::StatusCodeToString(r.status.code()),
                    "): ", r.status.message());
  } else if (!r.status.ok()) {
    absl::StrAppend(&text, ": ", r.status.message());
  }
  return text;
}

int RunReap(const ReapOptions& options) {
  IgnoreLockOrderCycles();
  int code = kExitOk;
  const auto step = [&](const std::string& address) {
    return ReapOne(options, address);
  };
  Reap(options, step, [&](const ReapResult& result) {
    std::cout << FormatResult(result, options.json) << '\n' << std::flush;
    if (result.action == ReapAction::kPollFailed ||
        result.action == ReapAction::kStopFailed) {
      code = kExitRuntimeFailure;
    }
  });
  return code;
}

std::vector<Command> ReapCommands() {
  Command reap{
      .name = "reap",
      .help =
          "poll many workers and stop those idle past a threshold: reap "
          "--idle-threshold-seconds S ADDRESS... ('-': from stdin)",
      .takes_arguments = true,
      .add = [](CLI::App& command) -> Runner {
        struct Flags {
          explicit Flags(CLI::App* command)
              : client(command,
                       "deadline of each idle poll in seconds, > 0 (default 5)",
                       /*one_address=*/false),
                reap(command) {}
          Client client;
          ReapFlags reap;
        };
        auto flags = std::make_shared<Flags>(&command);
        return [flags](const std::vector<std::string>& after) -> int {
          auto options = flags->client.Resolve(std::chrono::seconds(5));
          if (!options) return kExitUsage;
          if (absl::Status s = flags->reap.Finish(after); !s.ok()) {
            return GatherFailed(flags->client.command, s);
          }
          flags->reap.reap.client = *options;
          return RunReap(flags->reap.reap);
        };
      }};
  return {std::move(reap)};
}

}  // namespace cfdb::worker::cli

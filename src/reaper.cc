#include "cfdb/worker/reaper.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/log.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

std::string_view ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kIdle: return "idle";
    case ExitReason::kMaxLifetime: return "max lifetime";
    case ExitReason::kSignal: return "signal";
    case ExitReason::kStopRpc: return "stop rpc";
    case ExitReason::kRequested: return "requested";
  }
  return "unknown";
}

Reaper::Reaper(ReaperOptions options, const Clock& clock, Watcher watcher,
               ConnectionFactory connect, Stopper stop)
    : options_(options),
      clock_(clock),
      watcher_(std::move(watcher)),
      connect_(std::move(connect)),
      stop_(std::move(stop)) {}

std::string Reaper::RemainingBound(TimePoint now) const {
  if (options_.max_lifetime <= Duration::zero()) {
    return "no backstop: max lifetime is disabled";
  }
  const Duration left =
      std::max(start_ + options_.max_lifetime - now, Duration::zero());
  return absl::StrFormat("max lifetime backstop in %.0f s", ToSeconds(left));
}

Reaper::Poll Reaper::PollOnce(TimePoint now, TimePoint* next_poll) {
  *next_poll = now + options_.idle_poll_interval;
  absl::StatusOr<double> idle = source_->IdleTime(options_.idle_poll_deadline);
  if (idle.ok()) {
    consecutive_failures_ = 0;
    last_idle_seconds_ = *idle;
    const double timeout = ToSeconds(options_.idle_timeout);
    spdlog::debug("idle poll: idle {:.3f} s of {:.3f} s", *idle, timeout);
    if (*idle >= timeout) return Poll::kIdleExit;
    // Poll again when the threshold would be reached, if before the cadence:
    // an idle worker then exits right at its threshold, not up to one
    // interval late. A reading after new work simply shows less idle.
    *next_poll = std::min(*next_poll,
                          now + ToDuration(Seconds(timeout - *idle)));
    return Poll::kContinue;
  }
  const absl::Status& status = idle.status();
  const ErrorKind kind = ClassifyError(Rpc::kIdle, status);
  const std::string what =
      absl::StrCat(std::string(ErrorKindName(kind)), " (",
                   absl::StatusCodeToString(status.code()), ": ",
                   status.message(), ")");
  const std::initializer_list<LogField> fields = {
      {"failure_kind", ErrorKindName(kind)},
      {"grpc_code", absl::StatusCodeToString(status.code())}};
  if (kind == ErrorKind::kIdleUnavailable) {
    LogEvent(spdlog::level::warn,
             absl::StrCat("idle poll: ", what,
                          ": the worker predates the Idle RPC; idle polling "
                          "is disabled for the rest of the process; ",
                          RemainingBound(now)),
             fields);
    polling_ = false;
    return Poll::kContinue;
  }
  ++consecutive_failures_;
  if (consecutive_failures_ >= options_.idle_poll_failure_limit) {
    LogEvent(spdlog::level::err,
             absl::StrCat("idle poll failed ", consecutive_failures_,
                          " times in a row, last with ", what,
                          "; idle polling stopped; ", RemainingBound(now)),
             fields);
    polling_ = false;
    return Poll::kContinue;
  }
  LogEvent(spdlog::level::warn,
           absl::StrCat("idle poll failed (", consecutive_failures_, " of ",
                        options_.idle_poll_failure_limit, " in a row): ", what,
                        "; retrying in ", ToSeconds(options_.idle_poll_interval),
                        " s; ", RemainingBound(now)),
           fields);
  return Poll::kContinue;
}

ReaperExit Reaper::Run() {
  start_ = clock_.Now();
  if (options_.idle_timeout > Duration::zero()) {
    absl::StatusOr<std::unique_ptr<IdleSource>> source = connect_();
    if (source.ok()) {
      source_ = *std::move(source);
      polling_ = true;
    } else {
      spdlog::error("idle poll: cannot connect to the worker: {}; idle polling "
                    "disabled; {}",
                    source.status().ToString(), RemainingBound(start_));
    }
  }

  ReaperExit exit;
  // A worker is idle from startup, so the first poll comes no later than the
  // idle timeout: one that never gets work exits at its threshold, not at the
  // first tick of the cadence.
  TimePoint next_poll =
      start_ + std::min(options_.idle_poll_interval, options_.idle_timeout);
  while (true) {
    const TimePoint now = clock_.Now();
    if (options_.max_lifetime > Duration::zero() &&
        now - start_ >= options_.max_lifetime) {
      exit.reason = ExitReason::kMaxLifetime;
      exit.grace = options_.max_lifetime_grace;
      break;
    }
    if (const StopCause cause = watcher_.cause(); cause != StopCause::kNone) {
      exit.reason = cause == StopCause::kSignal    ? ExitReason::kSignal
                    : cause == StopCause::kStopRpc ? ExitReason::kStopRpc
                                                   : ExitReason::kRequested;
      exit.grace = options_.signal_grace;
      break;
    }
    if (polling_ && now >= next_poll &&
        PollOnce(now, &next_poll) == Poll::kIdleExit) {
      exit.reason = ExitReason::kIdle;
      exit.grace = options_.max_lifetime_grace;
      break;
    }
    TimePoint wake = polling_ ? next_poll : TimePoint::max();
    if (options_.max_lifetime > Duration::zero()) {
      wake = std::min(wake, start_ + options_.max_lifetime);
    }
    clock_.WaitUntil(wake, watcher_);
  }
  exit.idle_seconds = last_idle_seconds_;

  if (source_ != nullptr) {
    if (absl::Status s = source_->Close(); !s.ok()) {
      spdlog::warn("closing the idle poll connection failed: {}", s.ToString());
    }
  }
  std::string why;
  switch (exit.reason) {
    case ExitReason::kIdle:
      why = absl::StrFormat("idle for %.3f s >= idle timeout %.3f s",
                            exit.idle_seconds, ToSeconds(options_.idle_timeout));
      break;
    case ExitReason::kMaxLifetime:
      why = absl::StrFormat("max lifetime %.3f s reached",
                            ToSeconds(options_.max_lifetime));
      break;
    default:
      why = std::string(ExitReasonName(exit.reason));
  }
  const std::string drain =
      exit.reason == ExitReason::kStopRpc ? "with the Stop call's grace"
      : exit.grace < Duration::zero()
          ? "without limit"
          : absl::StrFormat("with grace %.3f s", ToSeconds(exit.grace));
  std::vector<LogField> fields = {
      {"exit_reason", std::string(ExitReasonName(exit.reason))},
      {"idle_seconds", exit.idle_seconds},
      {"idle_timeout_seconds", ToSeconds(options_.idle_timeout)},
      {"max_lifetime_seconds", ToSeconds(options_.max_lifetime)}};
  // A Stop call drains with its own grace, logged when the call came in.
  if (exit.reason != ExitReason::kStopRpc) {
    fields.push_back({"grace_seconds", ToSeconds(exit.grace)});
  }
  LogEvent(spdlog::level::info,
           absl::StrCat("exiting: ", why, "; draining ", drain), fields);
  if (exit.reason == ExitReason::kIdle ||
      exit.reason == ExitReason::kMaxLifetime) {
    stop_({.source = std::string(ExitReasonName(exit.reason)),
           .grace = exit.grace});
  }
  return exit;
}

TimePoint Reaper::lifetime_end() const {
  if (options_.max_lifetime <= Duration::zero()) return TimePoint::max();
  return start_ + options_.max_lifetime;
}

namespace {

// LoopbackHint adds the likely cause to the handshake errors of a self-poll
// that verifies the worker against the dialled loopback address.
class LoopbackHint final : public IdleSource {
 public:
  explicit LoopbackHint(std::unique_ptr<WorkerConnection> connection)
      : connection_(std::move(connection)) {}

  absl::StatusOr<double> IdleTime(Duration timeout) override {
    absl::StatusOr<double> idle = connection_->IdleTime(timeout);
    if (idle.ok() ||
        ClassifyError(Rpc::kIdle, idle.status()) != ErrorKind::kHandshakeError) {
      return idle;
    }
    return absl::Status(
        idle.status().code(),
        absl::StrCat(idle.status().message(),
                     " -- likely cause: the worker's certificate has no SAN for ",
                     connection_->target(),
                     "'s host; set --tls-identity to a name the certificate "
                     "has, or add the loopback SAN"));
  }
  absl::Status Close() override { return connection_->Close(); }

 private:
  std::unique_ptr<WorkerConnection> connection_;
};

}  // namespace

Reaper::ConnectionFactory SelfPollFactory(std::string host, int port,
                                          Credentials credentials) {
  return [host = std::move(host), port, credentials]()
             -> absl::StatusOr<std::unique_ptr<IdleSource>> {
    auto connection =
        WorkerConnection::Open(LoopbackTarget(host, port), credentials);
    if (!connection.ok()) return connection.status();
    if (credentials.kind == Credentials::Kind::kMutualTls &&
        credentials.identity.empty()) {
      return std::make_unique<LoopbackHint>(*std::move(connection));
    }
    return std::unique_ptr<IdleSource>(*std::move(connection));
  };
}

}  // namespace cfdb::worker

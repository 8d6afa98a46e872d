#include "daemon/retirement.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cfdb/worker/errors.h"
#include "core/log.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

std::string_view ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kIdle:
      return "idle";
    case ExitReason::kMaxLifetime:
      return "max lifetime";
    case ExitReason::kSignal:
      return "signal";
    case ExitReason::kStopRpc:
      return "stop rpc";
    case ExitReason::kRequested:
      return "requested";
    case ExitReason::kListenerLost:
      return "listener lost";
  }
  return "unknown";
}

RetirementPolicy::RetirementPolicy(RetirementOptions options,
                                   const Clock& clock, Watcher watcher,
                                   ConnectionFactory connect, Stopper stop)
    : options_(std::move(options)),
      clock_(clock),
      watcher_(std::move(watcher)),
      connect_(std::move(connect)),
      stop_(std::move(stop)) {}

std::string RetirementPolicy::RemainingBound(TimePoint now) const {
  if (!lifetime_) return "no backstop: max lifetime is disabled";
  const Duration left = std::max(start_ + *lifetime_ - now, Duration::zero());
  return absl::StrFormat("max lifetime backstop in %.0f s", ToSeconds(left));
}

RetirementPolicy::Poll RetirementPolicy::PollOnce(TimePoint now,
                                                  TimePoint* next_poll) {
  const bool slow = consecutive_failures_ >= options_.idle_poll_failure_limit;
  *next_poll = now + options_.idle_poll_interval * (slow ? kSlowPollFactor : 1);
  const bool fresh = ++polls_ % kFreshDialEvery == 0;
  absl::StatusOr<double> idle =
      fresh ? source_->FreshIdleTime(options_.idle_poll_deadline)
            : source_->IdleTime(options_.idle_poll_deadline);
  if (!idle.ok()) {
    PollFailed(now, idle.status(), fresh);
    return fresh_failures_ >= kListenerLostAfter ? Poll::kListenerLost
                                                 : Poll::kContinue;
  }
  if (consecutive_failures_ >= options_.idle_poll_failure_limit) {
    spdlog::info("idle poll: answered again after {} failures in a row",
                 consecutive_failures_);
  }
  consecutive_failures_ = 0;
  if (fresh) fresh_failures_ = 0;
  last_idle_seconds_ = *idle;
  const double timeout = ToSeconds(options_.idle_timeout);
  spdlog::debug("idle poll: idle {:.3f} s of {:.3f} s", *idle, timeout);
  if (*idle >= timeout) return Poll::kIdleExit;
  // Poll again when the threshold would be reached, if before the cadence:
  // an idle worker then exits right at its threshold, not up to one
  // interval late. A reading after new work simply shows less idle.
  *next_poll = std::min(*next_poll, now + ToDuration(Seconds(timeout - *idle)));
  return Poll::kContinue;
}

void RetirementPolicy::PollFailed(TimePoint now, const absl::Status& status,
                                  bool fresh) {
  ++poll_failures_;
  const ErrorKind kind = ClassifyError(Rpc::kIdle, status);
  const std::string what = absl::StrCat(fresh ? "on a fresh connection: " : "",
                                        std::string(ErrorKindName(kind)), " (",
                                        absl::StatusCodeToString(status.code()),
                                        ": ", status.message(), ")");
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
    return;
  }
  // A new connection that is not even answered: the listener may be gone.
  if (fresh && kind == ErrorKind::kTransient) ++fresh_failures_;
  ++consecutive_failures_;
  if (consecutive_failures_ > options_.idle_poll_failure_limit) {
    spdlog::debug("idle poll failed again: {}", what);
    return;
  }
  if (consecutive_failures_ == options_.idle_poll_failure_limit) {
    LogEvent(
        spdlog::level::err,
        absl::StrCat("idle poll failed ", consecutive_failures_,
                     " times in a row, last with ", what, "; polling on every ",
                     ToSeconds(options_.idle_poll_interval) * kSlowPollFactor,
                     " s; ", RemainingBound(now)),
        fields);
    return;
  }
  LogEvent(
      spdlog::level::warn,
      absl::StrCat("idle poll failed (", consecutive_failures_, " of ",
                   options_.idle_poll_failure_limit, " in a row): ", what,
                   "; retrying in ", ToSeconds(options_.idle_poll_interval),
                   " s; ", RemainingBound(now)),
      fields);
}

std::optional<Retirement> RetirementPolicy::Decide(TimePoint now,
                                                   TimePoint* next_poll) {
  if (lifetime_ && now - start_ >= *lifetime_) {
    return Retirement{.reason = ExitReason::kMaxLifetime,
                      .grace = options_.max_lifetime_grace};
  }
  if (const StopCause cause = watcher_.cause(); cause != StopCause::kNone) {
    return Retirement{
        .reason = cause == StopCause::kSignal    ? ExitReason::kSignal
                  : cause == StopCause::kStopRpc ? ExitReason::kStopRpc
                                                 : ExitReason::kRequested,
        .grace = options_.signal_grace};
  }
  if (polling_ && now >= *next_poll) {
    switch (PollOnce(now, next_poll)) {
      case Poll::kIdleExit:
        return Retirement{.reason = ExitReason::kIdle,
                          .grace = options_.max_lifetime_grace};
      case Poll::kListenerLost:
        return Retirement{.reason = ExitReason::kListenerLost,
                          .grace = options_.max_lifetime_grace};
      case Poll::kContinue:
        break;
    }
  }
  return std::nullopt;
}

void RetirementPolicy::DrawLifetime() {
  if (options_.max_lifetime <= Duration::zero()) return;
  lifetime_ = options_.max_lifetime;
  const Duration half = *lifetime_ / 2;
  const Duration bound =
      std::clamp(options_.max_lifetime_jitter, Duration::zero(), half);
  if (options_.max_lifetime_jitter > half) {
    spdlog::warn(
        "max lifetime jitter {:.3f} s is more than half the max lifetime "
        "{:.3f} s: capped at {:.3f} s",
        ToSeconds(options_.max_lifetime_jitter),
        ToSeconds(options_.max_lifetime), ToSeconds(half));
  }
  if (bound <= Duration::zero()) return;
  Duration jitter = Duration::zero();
  if (options_.draw_jitter) {
    jitter = std::clamp(options_.draw_jitter(bound), Duration::zero(), bound);
  } else {
    absl::BitGen random;
    jitter = ToDuration(Seconds(
        absl::Uniform(absl::IntervalClosed, random, 0.0, ToSeconds(bound))));
  }
  *lifetime_ -= jitter;
  LogEvent(spdlog::level::info,
           absl::StrFormat("max lifetime: %.3f s less a jitter of %.3f s "
                           "(drawn from 0..%.3f s): retiring %.3f s after "
                           "start",
                           ToSeconds(options_.max_lifetime), ToSeconds(jitter),
                           ToSeconds(bound), ToSeconds(*lifetime_)),
           {{"max_lifetime_seconds", ToSeconds(options_.max_lifetime)},
            {"max_lifetime_jitter_seconds", ToSeconds(jitter)},
            {"lifetime_seconds", ToSeconds(*lifetime_)}});
}

Retirement RetirementPolicy::Run() {
  start_ = clock_.Now();
  DrawLifetime();
  if (options_.idle_timeout > Duration::zero()) {
    absl::StatusOr<std::unique_ptr<IdleSource>> source = connect_();
    if (source.ok()) {
      source_ = *std::move(source);
      polling_ = true;
    } else {
      spdlog::error(
          "idle poll: cannot connect to the worker: {}; idle polling "
          "disabled; {}",
          source.status().ToString(), RemainingBound(start_));
    }
  }
  // A worker is idle from startup, so the first poll comes no later than the
  // idle timeout: one that never gets work exits at its threshold, not at the
  // first tick of the cadence.
  TimePoint next_poll =
      start_ + std::min(options_.idle_poll_interval, options_.idle_timeout);
  std::optional<Retirement> retirement;
  while (!(retirement = Decide(clock_.Now(), &next_poll))) {
    TimePoint wake = polling_ ? next_poll : TimePoint::max();
    wake = std::min(wake, lifetime_end());
    clock_.WaitUntil(wake, watcher_);
  }
  retirement->idle_seconds = last_idle_seconds_;
  if (source_ != nullptr) {
    if (absl::Status s = source_->Close(); !s.ok()) {
      spdlog::warn("closing the idle poll connection failed: {}", s.ToString());
    }
  }
  LogRetirement(*retirement);
  if (retirement->reason == ExitReason::kIdle ||
      retirement->reason == ExitReason::kMaxLifetime ||
      retirement->reason == ExitReason::kListenerLost) {
    stop_({.source = std::string(ExitReasonName(retirement->reason)),
           .grace = retirement->grace});
  }
  return *retirement;
}

void RetirementPolicy::LogRetirement(const Retirement& retirement) const {
  std::string why;
  switch (retirement.reason) {
    case ExitReason::kIdle:
      why = absl::StrFormat("idle for %.3f s >= idle timeout %.3f s",
                            retirement.idle_seconds,
                            ToSeconds(options_.idle_timeout));
      break;
    case ExitReason::kMaxLifetime:
      why = absl::StrFormat("max lifetime %.3f s reached",
                            ToSeconds(lifetime_.value_or(Duration::zero())));
      break;
    case ExitReason::kListenerLost:
      why = absl::StrCat("listener lost: ", kListenerLostAfter,
                         " fresh connections in a row were not answered, so "
                         "no new client can reach this worker");
      break;
    default:
      why = std::string(ExitReasonName(retirement.reason));
  }
  const std::string drain =
      retirement.reason == ExitReason::kStopRpc ? "with the Stop call's grace"
      : retirement.grace < Duration::zero()
          ? "without limit"
          : absl::StrFormat("with grace %.3f s", ToSeconds(retirement.grace));
  std::vector<LogField> fields = {
      {"exit_reason", std::string(ExitReasonName(retirement.reason))},
      {"idle_seconds", retirement.idle_seconds},
      {"idle_timeout_seconds", ToSeconds(options_.idle_timeout)},
      {"max_lifetime_seconds", ToSeconds(options_.max_lifetime)},
      {"lifetime_seconds", ToSeconds(lifetime_.value_or(Duration::zero()))}};
  // A Stop call drains with its own grace, logged when the call came in.
  if (retirement.reason != ExitReason::kStopRpc) {
    fields.push_back({"grace_seconds", ToSeconds(retirement.grace)});
  }
  LogEvent(retirement.reason == ExitReason::kListenerLost ? spdlog::level::err
                                                          : spdlog::level::info,
           absl::StrCat("exiting: ", why, "; draining ", drain), fields);
}

TimePoint RetirementPolicy::lifetime_end() const {
  return lifetime_ ? start_ + *lifetime_ : TimePoint::max();
}

}  // namespace cfdb::worker

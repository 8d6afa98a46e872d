#include "serve/retirement.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
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

namespace {

Duration ListenerCheckDeadline(const RetirementOptions& options) {
  return std::min(kListenerCheckDeadline, options.listener_check_interval);
}

}  // namespace

Duration ListenerLostBound(const RetirementOptions& options) {
  const Duration poll = options.idle_timeout > Duration::zero()
                            ? options.idle_poll_deadline
                            : Duration::zero();
  return options.listener_check_interval + poll +
         kListenerLostAfter * ListenerCheckDeadline(options) +
         (kListenerLostAfter - 1) * kListenerRecheck;
}

RetirementPolicy::RetirementPolicy(RetirementOptions options,
                                   const Clock& clock, Watcher watcher,
                                   Hooks hooks)
    : options_(std::move(options)),
      clock_(clock),
      watcher_(std::move(watcher)),
      hooks_(std::move(hooks)) {}

std::string RetirementPolicy::RemainingBound(TimePoint now) const {
  if (!lifetime_) return "no backstop: max lifetime is disabled";
  const Duration left = std::max(start_ + *lifetime_ - now, Duration::zero());
  return absl::StrFormat("max lifetime backstop in %.0f s", ToSeconds(left));
}

RetirementPolicy::Poll RetirementPolicy::PollOnce(TimePoint now,
                                                  TimePoint* next_poll) {
  const bool slow = consecutive_failures_ >= options_.idle_poll_failure_limit;
  *next_poll = now + options_.idle_poll_interval * (slow ? kSlowPollFactor : 1);
  absl::StatusOr<double> idle = source_->IdleTime(options_.idle_poll_deadline);
  if (!idle.ok()) {
    PollFailed(now, idle.status());
    return Poll::kContinue;
  }
  if (consecutive_failures_ >= options_.idle_poll_failure_limit) {
    spdlog::info("idle poll: answered again after {} failures in a row",
                 consecutive_failures_);
  }
  consecutive_failures_ = 0;
  ++poll_answers_;
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

void RetirementPolicy::PollFailed(TimePoint now, const absl::Status& status) {
  ++poll_failures_;
  const ErrorKind kind = ClassifyError(Rpc::kIdle, status);
  const std::string what = absl::StrCat(std::string(ErrorKindName(kind)), " (",
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

bool RetirementPolicy::CheckListener() {
  const absl::Status status =
      hooks_.dial_fresh(ListenerCheckDeadline(options_));
  const TimePoint now = clock_.Now();
  // Any answer, a refusal or a failed handshake included, proves that the
  // listener accepted the connection.
  if (status.ok() ||
      ClassifyError(Rpc::kIdle, status) != ErrorKind::kTransient) {
    if (listener_failures_ > 0 || listener_unknown_) {
      spdlog::info("listener check: a new connection is answered again");
    }
    listener_failures_ = 0;
    listener_unknown_ = false;
    ++listener_answered_;
    next_listener_check_ = now + options_.listener_check_interval;
    return false;
  }
  next_listener_check_ = now + kListenerRecheck;
  const std::string what = absl::StrCat(absl::StatusCodeToString(status.code()),
                                        ": ", status.message());
  if (hooks_.can_open_descriptor && !hooks_.can_open_descriptor()) {
    // Out of descriptors here: the dial may have failed on our own side.
    if (!listener_unknown_) {
      spdlog::warn(
          "listener check: a new connection was not answered ({}), but this "
          "process cannot open a descriptor now, so that says nothing of the "
          "listener; checking every {} s until it can",
          what, ToSeconds(kListenerRecheck));
    }
    listener_unknown_ = true;
    ++listener_unknown_checks_;
    return false;
  }
  listener_unknown_ = false;
  ++listener_failures_;
  ++listener_unanswered_;
  LogEvent(spdlog::level::warn,
           absl::StrCat("listener check: a new connection was not answered (",
                        listener_failures_, " of ", kListenerLostAfter,
                        " in a row): ", what),
           {{"grpc_code", absl::StatusCodeToString(status.code())}});
  if (listener_failures_ < kListenerLostAfter) return false;
  listener_lost_ = true;
  return true;
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
  if (hooks_.dial_fresh &&
      (now >= next_listener_check_ || check_listener_soon_.exchange(false))) {
    if (CheckListener()) {
      return Retirement{.reason = ExitReason::kListenerLost,
                        .grace = options_.max_lifetime_grace};
    }
    now = clock_.Now();
  }
  // While new connections go unanswered the checks come first: a poll
  // could only delay the verdict.
  if (polling_ && listener_failures_ == 0 && now >= *next_poll &&
      PollOnce(now, next_poll) == Poll::kIdleExit &&
      RetireIdle(now, next_poll)) {
    return Retirement{.reason = ExitReason::kIdle,
                      .grace = options_.max_lifetime_grace};
  }
  return std::nullopt;
}

bool RetirementPolicy::RetireIdle(TimePoint now, TimePoint* next_poll) {
  if (!hooks_.stop_if_idle) return true;  // Run makes the request
  // The poll read the idle time a moment ago; a job accepted since then
  // must keep its worker, so the stop is decided again, atomically with
  // admission, in the worker.
  const absl::Status s = hooks_.stop_if_idle(
      {.source = std::string(ExitReasonName(ExitReason::kIdle)),
       .grace = options_.max_lifetime_grace},
      options_.idle_timeout);
  if (s.ok()) {
    idle_stop_requested_ = true;
    return true;
  }
  kept_serving_log_.Log(
      "idle retirement kept serving", spdlog::level::info,
      absl::StrCat("idle retirement: kept serving: ", s.message()));
  *next_poll = now + options_.idle_poll_interval;
  return false;
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
  if (options_.draw_jitter) {
    jitter_ = std::clamp(options_.draw_jitter(bound), Duration::zero(), bound);
  } else {
    absl::BitGen random;
    jitter_ = ToDuration(Seconds(
        absl::Uniform(absl::IntervalClosed, random, 0.0, ToSeconds(bound))));
  }
  *lifetime_ -= jitter_;
  LogEvent(
      spdlog::level::info,
      absl::StrFormat("max lifetime: %.3f s less a jitter of %.3f s "
                      "(drawn from 0..%.3f s): retiring %.3f s after "
                      "start",
                      ToSeconds(options_.max_lifetime), ToSeconds(jitter_),
                      ToSeconds(bound), ToSeconds(*lifetime_)),
      {{"max_lifetime_seconds", ToSeconds(*lifetime_)},
       {"max_lifetime_configured_seconds", ToSeconds(options_.max_lifetime)},
       {"max_lifetime_jitter_seconds", ToSeconds(jitter_)}});
}

Retirement RetirementPolicy::Run(std::optional<TimePoint> started) {
  start_ = started.value_or(clock_.Now());
  DrawLifetime();
  lifetime_end_ticks_ = lifetime_end().time_since_epoch().count();
  if (options_.idle_timeout > Duration::zero() && hooks_.connect) {
    absl::StatusOr<std::unique_ptr<IdleSource>> source = hooks_.connect();
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
  next_listener_check_ = start_ + options_.listener_check_interval;
  std::optional<Retirement> retirement;
  while (!(retirement = Decide(clock_.Now(), &next_poll))) {
    TimePoint wake =
        polling_ && listener_failures_ == 0 ? next_poll : TimePoint::max();
    if (hooks_.dial_fresh) wake = std::min(wake, next_listener_check_);
    wake = std::min(wake, lifetime_end());
    clock_.WaitUntil(wake, watcher_);
  }
  if (source_ != nullptr) {
    if (absl::Status s = source_->Close(); !s.ok()) {
      spdlog::warn("closing the idle poll connection failed: {}", s.ToString());
    }
  }
  if (hooks_.stop && !idle_stop_requested_ &&
      (retirement->reason == ExitReason::kIdle ||
       retirement->reason == ExitReason::kMaxLifetime ||
       retirement->reason == ExitReason::kListenerLost)) {
    hooks_.stop({.source = std::string(ExitReasonName(retirement->reason)),
                 .grace = retirement->grace});
  }
  const std::optional<StopState> state =
      hooks_.stop_state ? hooks_.stop_state() : std::nullopt;
  retirement->idle_seconds =
      state ? ToSeconds(state->idle_at_request) : last_idle_seconds_;
  LogRetirement(*retirement, state);
  return *retirement;
}

namespace {

// RequestField names a stop source's field in the exit event:
// "stop_request_" and the source in lower case, other than letters and
// digits as '_' ("SIGTERM again" -> "stop_request_sigterm_again").
std::string RequestField(std::string_view source) {
  std::string field = "stop_request_";
  for (const char c : source) {
    field += absl::ascii_isalnum(static_cast<unsigned char>(c))
                 ? absl::ascii_tolower(static_cast<unsigned char>(c))
                 : '_';
  }
  return field;
}

}  // namespace

void RetirementPolicy::LogRetirement(
    const Retirement& retirement, const std::optional<StopState>& state) const {
  std::string why;
  switch (retirement.reason) {
    case ExitReason::kIdle:
      why =
          absl::StrFormat("idle for %.3f s >= idle timeout %.3f s",
                          last_idle_seconds_, ToSeconds(options_.idle_timeout));
      break;
    case ExitReason::kMaxLifetime:
      why = absl::StrFormat("max lifetime %.3f s reached",
                            ToSeconds(lifetime_.value_or(Duration::zero())));
      break;
    case ExitReason::kListenerLost:
      why = absl::StrCat("listener lost: ", kListenerLostAfter,
                         " new connections in a row were not answered, so "
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
      {"uptime_seconds", ToSeconds(clock_.Now() - start_)},
      {"idle_seconds", retirement.idle_seconds},
      {"idle_timeout_seconds", ToSeconds(options_.idle_timeout)},
      {"max_lifetime_seconds", ToSeconds(lifetime_.value_or(Duration::zero()))},
      {"max_lifetime_configured_seconds", ToSeconds(options_.max_lifetime)},
      {"max_lifetime_jitter_seconds", ToSeconds(jitter_)}};
  // One field per source that asked to stop, with the grace it asked for.
  std::vector<std::string> names;
  if (state) {
    names.reserve(state->sources.size());
    for (const StopRequests::Source& source : state->sources) {
      names.push_back(RequestField(source.earliest.source));
      const Duration grace = source.earliest.grace;
      fields.push_back(
          {names.back(), grace < Duration::zero() ? -1.0 : ToSeconds(grace)});
    }
  }
  LogEvent(retirement.reason == ExitReason::kListenerLost ? spdlog::level::err
                                                          : spdlog::level::info,
           absl::StrCat("exiting: ", why, "; draining ", drain), fields);
}

RetirementPolicy::Reading RetirementPolicy::reading() const {
  Reading r{.polls_answered = poll_answers_.load(),
            .polls_failed = poll_failures_.load(),
            .listener_answered = listener_answered_.load(),
            .listener_unanswered = listener_unanswered_.load(),
            .listener_unknown = listener_unknown_checks_.load(),
            .listener_lost = listener_lost_.load()};
  const Duration::rep end = lifetime_end_ticks_.load();
  if (end != 0 && end != Duration::max().count()) {
    r.lifetime_end = TimePoint(Duration(end));
  }
  return r;
}

TimePoint RetirementPolicy::lifetime_end() const {
  return lifetime_ ? start_ + *lifetime_ : TimePoint::max();
}

}  // namespace cfdb::worker

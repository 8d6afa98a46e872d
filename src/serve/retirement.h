// The retirement policy: the serve loop's decision when a worker retires
// and with which drain grace. It polls the worker's idle time through an
// IdleSource (in the daemon, the loopback self-poll of self_poll.h, dialled
// like any client) and watches the max lifetime.
//
// Each turn checks, in order: max lifetime, then a stop requested elsewhere
// (signal or Stop RPC), then the listener, then the idle poll, so a signal
// always beats an idle exit. The listener check runs on a cadence of its
// own, whatever the idle timeout: every listener_check_interval it dials a
// connection of its own and calls Idle, proving that the worker still
// accepts new connections (gRPC 1.51 never accepts again after one failed
// accept4, e.g. EMFILE). A dial that is not answered counts only while this
// process can open a descriptor (otherwise it says nothing of the
// listener); after kListenerLostAfter such dials in a row, kListenerRecheck
// apart and with no idle poll between them, the worker retires as
// "listener lost" (ListenerLostBound says how soon). CheckListenerSoon runs a
// check at once (gRPC logged a failed accept). After idle_poll_failure_limit
// failed polls in a row the ERROR is logged once and polling goes on every
// kSlowPollFactor intervals, so that retirement resumes when the self-poll
// recovers. Waits between turns end at once when a stop is requested. The
// policy asks for its own retirements (idle, max lifetime, listener lost)
// through the stopper; a signal or a Stop RPC has made its request already, and
// the drains compose in the worker (drain.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/serve_config.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/worker.h"
#include "core/log_throttle.h"

namespace cfdb::worker {

// Unanswered listener checks in a row that retire the worker as "listener
// lost".
inline constexpr int kListenerLostAfter = 3;
// Each listener check waits this long for an answer at most (or the check
// interval, if shorter); a worker on loopback answers in milliseconds.
inline constexpr Duration kListenerCheckDeadline = std::chrono::seconds(3);
// After a listener check that was not answered (or said nothing), the next
// comes this soon.
inline constexpr Duration kListenerRecheck = std::chrono::seconds(1);
inline constexpr int kSlowPollFactor = 4;

enum class ExitReason {
  kIdle,
  kMaxLifetime,
  kSignal,
  kStopRpc,
  kRequested,
  kListenerLost
};

// ExitReasonName returns "idle", "max lifetime", "signal", "stop rpc",
// "requested" or "listener lost".
std::string_view ExitReasonName(ExitReason reason);

// ListenerLostBound returns how long after the listener is lost (and the
// process can open descriptors) the worker retires as "listener lost" at the
// latest: a check interval, one idle poll waiting its whole deadline in the
// way (none while polls are off), then kListenerLostAfter checks each
// waiting its whole deadline, kListenerRecheck apart; no poll runs between
// them. 26 s at the defaults.
Duration ListenerLostBound(const RetirementOptions& options);

// Retirement is why and how the loop ended.
struct Retirement {
  ExitReason reason = ExitReason::kRequested;
  // The drain grace the worker was stopped with (none for kStopRpc, whose
  // caller chose the grace).
  Duration grace = Duration::zero();
  // The worker's idle seconds when the first stop was requested (from the
  // worker itself; the last poll reading when the stop_state hook is
  // unset).
  double idle_seconds = 0;
};

// IdleSource is where the policy reads the worker's idle time.
class IdleSource {
 public:
  virtual ~IdleSource() = default;
  // IdleTime returns the worker's idle seconds, or the failed call's status
  // (see errors.h), within `timeout`.
  virtual absl::StatusOr<double> IdleTime(Duration timeout) = 0;
  // Close releases the source. May fail; safe to call more than once.
  virtual absl::Status Close() = 0;
};

// RetirementPolicy runs the serve loop's policy. Not thread-safe: one thread
// calls Run (CheckListenerSoon and poll_failures excepted).
class RetirementPolicy {
 public:
  // Makes the IdleSource for the polls.
  using ConnectionFactory =
      std::function<absl::StatusOr<std::unique_ptr<IdleSource>>()>;
  // Requests the worker's retirement (source "idle", "max lifetime" or
  // "listener lost", and its grace); returns at once.
  using Stopper = std::function<void(StopRequest request)>;

  // What the policy calls out to; a test injects fakes. Each may be empty.
  struct Hooks {
    // Called at most once, and only when the idle timeout is non-zero. An
    // error disables polling (logged). Empty: no idle polling.
    ConnectionFactory connect;
    // Dials a connection of its own and calls Idle on it within the
    // deadline: the listener check. Empty: no listener check.
    std::function<absl::Status(Duration deadline)> dial_fresh;
    // Whether the process can open a descriptor now: a dial that was not
    // answered counts only then. Empty: it always can.
    std::function<bool()> can_open_descriptor;
    Stopper stop;
    // Requests the idle retirement only if the worker has been idle for
    // `idle_for` at that moment (Worker::RequestStopIfIdle); a refusal
    // (FAILED_PRECONDITION: a job came since the poll, or detached results
    // are unread) keeps the worker serving and polling. Empty: `stop`.
    std::function<absl::Status(StopRequest request, Duration idle_for)>
        stop_if_idle;
    // The worker's stop requests so far (Worker::stop_state), read for the
    // exit event once the policy's own request is made.
    std::function<std::optional<StopState>()> stop_state;
  };

  // `clock` must outlive the policy; `watcher` reports requested stops (a
  // Shutdown::Wake ends a wait early, for CheckListenerSoon).
  RetirementPolicy(RetirementOptions options, const Clock& clock,
                   Watcher watcher, Hooks hooks);

  // Run loops until the worker must retire or a stop was requested
  // elsewhere, closes the connection (a failed close is logged, never
  // fatal), calls the stopper for an idle, max-lifetime or listener-lost
  // retirement, logs the exit event (one line: the reason and the fields
  // docs/DEPLOY.md lists) and returns the reason. The lifetime and the
  // uptime count from `started` (default: when Run starts), on `clock`.
  Retirement Run(std::optional<TimePoint> started = std::nullopt);

  // CheckListenerSoon makes the next turn check the listener, whatever the
  // cadence; the caller then wakes the loop's wait (Shutdown::Wake).
  // Thread-safe.
  void CheckListenerSoon() { check_listener_soon_ = true; }

  // poll_failures returns the failed idle polls since Run started.
  // Thread-safe.
  uint64_t poll_failures() const { return poll_failures_.load(); }

  // Reading is what the policy has seen since Run started, for the
  // metrics (docs/METRICS.md).
  struct Reading {
    uint64_t polls_answered = 0;
    uint64_t polls_failed = 0;
    uint64_t listener_answered = 0;
    uint64_t listener_unanswered = 0;
    // Unanswered while this process could open no descriptor: says nothing.
    uint64_t listener_unknown = 0;
    bool listener_lost = false;
    // When the effective lifetime ends; none while disabled or before Run.
    std::optional<TimePoint> lifetime_end;
  };
  // reading returns it now. Thread-safe.
  Reading reading() const;

  // lifetime_end returns when the effective lifetime (max lifetime less
  // the jitter drawn) ends (TimePoint::max() when it is disabled); valid
  // once Run has started.
  TimePoint lifetime_end() const;

 private:
  enum class Poll { kContinue, kIdleExit };
  // RetireIdle makes the idle retirement's request, conditional on the
  // worker being idle still; false when it keeps serving.
  bool RetireIdle(TimePoint now, TimePoint* next_poll);
  Poll PollOnce(TimePoint now, TimePoint* next_poll);
  // PollFailed logs a failed poll and decides how polling goes on.
  void PollFailed(TimePoint now, const absl::Status& status);
  // CheckListener dials afresh; true when the listener counts as lost.
  bool CheckListener();
  // Decide returns the retirement due at `now`, if any.
  std::optional<Retirement> Decide(TimePoint now, TimePoint* next_poll);
  void LogRetirement(const Retirement& retirement,
                     const std::optional<StopState>& state) const;
  std::string RemainingBound(TimePoint now) const;

  const RetirementOptions options_;
  const Clock& clock_;
  Watcher watcher_;
  Hooks hooks_;

  // DrawLifetime sets lifetime_ from the options and logs it.
  void DrawLifetime();

  TimePoint start_;
  std::optional<Duration> lifetime_;  // effective; none: disabled
  Duration jitter_ = Duration::zero();
  std::unique_ptr<IdleSource> source_;
  bool polling_ = false;
  int consecutive_failures_ = 0;
  std::atomic<uint64_t> poll_failures_{0};
  std::atomic<uint64_t> poll_answers_{0};
  std::atomic<uint64_t> listener_answered_{0};
  std::atomic<uint64_t> listener_unanswered_{0};
  std::atomic<uint64_t> listener_unknown_checks_{0};
  std::atomic<bool> listener_lost_{false};
  // lifetime_end() for other threads, in Duration ticks since the clock's
  // epoch; 0 until drawn, max when disabled.
  std::atomic<Duration::rep> lifetime_end_ticks_{0};
  bool idle_stop_requested_ = false;  // RetireIdle made the request
  // "kept serving" comes once per poll while unread results hold the
  // worker up: one line per period, with a count.
  LogThrottle kept_serving_log_{clock_};
  double last_idle_seconds_ = 0;
  TimePoint next_listener_check_;
  int listener_failures_ = 0;      // unanswered listener checks in a row
  bool listener_unknown_ = false;  // the last check said nothing
  std::atomic<bool> check_listener_soon_{false};
};

}  // namespace cfdb::worker

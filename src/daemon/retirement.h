// The retirement policy: the serve loop's decision when a worker retires
// and with which drain grace. It polls the worker's idle time through an
// IdleSource (in the daemon, the loopback self-poll of self_poll.h, dialled
// like any client) and watches the max lifetime.
//
// Each turn checks, in order: max lifetime, then a stop requested elsewhere
// (signal or Stop RPC), then the idle poll, so a signal always beats an idle
// exit. Every kFreshDialEvery-th poll dials a connection of its own, proving
// that the worker still accepts new connections: after
// kListenerLostAfter such dials in a row fail with a transient error, the
// worker retires as "listener lost" (no client could reach it any more;
// gRPC 1.51 never re-arms a listener after EMFILE). After
// idle_poll_failure_limit failed polls in a row the ERROR is logged once and
// polling goes on every kSlowPollFactor intervals, so that retirement
// resumes when the self-poll recovers. Waits between turns end at once when a
// stop is requested. The policy asks for its own retirements (idle, max
// lifetime) through the stopper; a signal or a Stop RPC has made its request
// already, and the drains compose in the worker (drain.h).
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
#include "cfdb/worker/shutdown.h"

namespace cfdb::worker {

// Defaults of the serve loop; cloudformation/workers.yml repeats the first
// four and its tests check they agree.
inline constexpr double kDefaultIdleTimeoutSeconds = 600;
inline constexpr double kDefaultMaxLifetimeSeconds = 43200;       // 12 h
inline constexpr double kDefaultMaxLifetimeGraceSeconds = 21600;  // 6 h
// Unless given, the jitter is this fraction of the max lifetime: 4320 s
// (1.2 h) at the default lifetime.
inline constexpr double kDefaultMaxLifetimeJitterFraction = 0.1;
inline constexpr double kDefaultMaxLifetimeJitterSeconds =
    kDefaultMaxLifetimeSeconds * kDefaultMaxLifetimeJitterFraction;
inline constexpr double kDefaultIdlePollIntervalSeconds = 15;
inline constexpr double kDefaultIdlePollDeadlineSeconds = 5;
inline constexpr int kDefaultIdlePollFailureLimit = 20;
inline constexpr double kDefaultSignalGraceSeconds = 0;
inline constexpr int kFreshDialEvery = 4;
inline constexpr int kListenerLostAfter = 3;
inline constexpr int kSlowPollFactor = 4;

struct RetirementOptions {
  // Idle at or past this retires the worker. Zero disables idle polling: no
  // connection is ever made.
  Duration idle_timeout = ToDuration(Seconds(kDefaultIdleTimeoutSeconds));
  // Time between polls (> 0). The next poll comes earlier when the last
  // reading says the timeout will be reached sooner.
  Duration idle_poll_interval =
      ToDuration(Seconds(kDefaultIdlePollIntervalSeconds));
  // Deadline of each poll (> 0).
  Duration idle_poll_deadline =
      ToDuration(Seconds(kDefaultIdlePollDeadlineSeconds));
  // After this many consecutive failed polls (>= 1) polling slows down to
  // every kSlowPollFactor intervals.
  int idle_poll_failure_limit = kDefaultIdlePollFailureLimit;
  // The worker retires this long after start whatever it is doing, less
  // the jitter. Zero disables.
  Duration max_lifetime = ToDuration(Seconds(kDefaultMaxLifetimeSeconds));
  // Staggered lifetimes: the effective lifetime is max_lifetime minus an
  // amount drawn uniformly from [0, max_lifetime_jitter] once, when Run
  // starts, and logged, so that a fleet started by one burst does not
  // retire in the same minute. Zero: exactly max_lifetime. More than half
  // the max lifetime is capped at half, with a warning (a template default
  // left as it is when the lifetime is lowered must not stop the worker).
  Duration max_lifetime_jitter =
      ToDuration(Seconds(kDefaultMaxLifetimeJitterSeconds));
  // Draws the amount from [0, max]; empty: uniform, from absl::BitGen.
  // Tests inject their own.
  std::function<Duration(Duration max)> draw_jitter;
  // Drain grace of the idle and max-lifetime exits.
  Duration max_lifetime_grace =
      ToDuration(Seconds(kDefaultMaxLifetimeGraceSeconds));
  // Drain grace of a signal (0: cancel at once, as the platform sends
  // SIGKILL soon after SIGTERM), counted from the signal's arrival. The
  // daemon's signal handler makes that request; the policy only reports it.
  Duration signal_grace = ToDuration(Seconds(kDefaultSignalGraceSeconds));
};

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

// Retirement is why and how the loop ended.
struct Retirement {
  ExitReason reason = ExitReason::kRequested;
  // The drain grace the worker was stopped with (none for kStopRpc, whose
  // caller chose the grace).
  Duration grace = Duration::zero();
  // The last idle reading in seconds (0 if none).
  double idle_seconds = 0;
};

// IdleSource is where the policy reads the worker's idle time.
class IdleSource {
 public:
  virtual ~IdleSource() = default;
  // IdleTime returns the worker's idle seconds, or the failed call's status
  // (see errors.h), within `timeout`.
  virtual absl::StatusOr<double> IdleTime(Duration timeout) = 0;
  // FreshIdleTime is IdleTime over a connection dialled for this call alone.
  virtual absl::StatusOr<double> FreshIdleTime(Duration timeout) {
    return IdleTime(timeout);
  }
  // Close releases the source. May fail; safe to call more than once.
  virtual absl::Status Close() = 0;
};

// RetirementPolicy runs the serve loop's policy. Not thread-safe: one thread
// calls Run.
class RetirementPolicy {
 public:
  // Makes the IdleSource for the polls; called at most once, and only when
  // the idle timeout is non-zero. An error disables polling (logged).
  using ConnectionFactory =
      std::function<absl::StatusOr<std::unique_ptr<IdleSource>>()>;
  // Requests the worker's retirement (source "idle" or "max lifetime", and
  // its grace); returns at once.
  using Stopper = std::function<void(StopRequest request)>;

  // `clock` must outlive the policy; `watcher` reports requested stops.
  RetirementPolicy(RetirementOptions options, const Clock& clock,
                   Watcher watcher, ConnectionFactory connect, Stopper stop);

  // Run loops until the worker must retire or a stop was requested
  // elsewhere, closes the connection (a failed close is logged, never
  // fatal), logs one line with the reason, calls the stopper for an idle,
  // max-lifetime or listener-lost retirement and returns the reason.
  Retirement Run();

  // poll_failures returns the failed idle polls since Run started.
  // Thread-safe.
  uint64_t poll_failures() const { return poll_failures_.load(); }

  // lifetime_end returns when the effective lifetime (max lifetime less
  // the jitter drawn) ends (TimePoint::max() when it is disabled); valid
  // once Run has started.
  TimePoint lifetime_end() const;

 private:
  enum class Poll { kContinue, kIdleExit, kListenerLost };
  Poll PollOnce(TimePoint now, TimePoint* next_poll);
  // PollFailed logs a failed poll and decides how polling goes on.
  void PollFailed(TimePoint now, const absl::Status& status, bool fresh);
  // Decide returns the retirement due at `now`, if any.
  std::optional<Retirement> Decide(TimePoint now, TimePoint* next_poll);
  void LogRetirement(const Retirement& retirement) const;
  std::string RemainingBound(TimePoint now) const;

  const RetirementOptions options_;
  const Clock& clock_;
  Watcher watcher_;
  ConnectionFactory connect_;
  Stopper stop_;

  // DrawLifetime sets lifetime_ from the options and logs it.
  void DrawLifetime();

  TimePoint start_;
  std::optional<Duration> lifetime_;  // effective; none: disabled
  std::unique_ptr<IdleSource> source_;
  bool polling_ = false;
  int consecutive_failures_ = 0;
  int polls_ = 0;
  int fresh_failures_ = 0;  // fresh dials failed in a row
  std::atomic<uint64_t> poll_failures_{0};
  double last_idle_seconds_ = 0;
};

}  // namespace cfdb::worker

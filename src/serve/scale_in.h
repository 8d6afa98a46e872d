// Busy-aware ECS task scale-in protection: while the worker has a job in
// flight, the ECS container agent is told to protect its task from a
// service's scale-in and deployments (PUT
// $ECS_AGENT_URI/task-protection/v1/state, {"ProtectionEnabled": true,
// "ExpiresInMinutes": N}; AWS's "Amazon ECS task scale-in protection"
// endpoint), and told again once it is idle.
//
// Calls come per busy period, not per job: the docket's empty -> busy edge
// enables protection for N minutes, it is renewed at half of that while
// wanted (a 6-hour job stays protected), and it is disabled only once the
// docket has stayed empty for a hold (a job that arrives within the hold
// costs no call). Calls run on a thread of their own, never on the
// dispatch path, with a bounded timeout; a failure is retried with the
// backoff and never disables the feature; the state the agent gets is
// always the one wanted at the time of the call, so busy -> idle -> busy
// quickly ends protected.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "serve/backoff.h"

namespace cfdb::worker {

// The longest expiry ECS takes (its defaults: ScaleInOptions).
inline constexpr int kMaxProtectionExpiresMinutes = 2880;
// Each agent call gives up after this long.
inline constexpr Duration kAgentCallTimeout = std::chrono::seconds(5);
// Retries of a failed call: 1 s, doubling, up to a minute.
inline constexpr Duration kAgentRetryInitialDelay = std::chrono::seconds(1);
inline constexpr Duration kAgentRetryMaxDelay = std::chrono::minutes(1);
// An idle task's protection outlives the hold only by a call: the renewal
// made at half the shortest expiry always leaves more than a call to run.
static_assert(kAgentCallTimeout < std::chrono::seconds(60) / 2);

// ProtectionPolicy decides when to call the agent and with what. Time comes
// in as arguments, so tests run hours of it in microseconds. Not
// thread-safe.
//
// Protection is wanted while the docket is busy, and for `hold` after it
// empties, as long as the agent is known to have it on (after a failed call
// an idle task is sent "disabled" at once). While idle, a renewal is sent
// only if it can end, `call_timeout` later, within the hold; otherwise the
// protection, which a renewal at half the expiry keeps for more than a call
// (static_assert above), lasts to the hold's end without it. So with an
// agent that answers, an idle task is never protected past its idle edge
// plus the longer of the hold and one call (a call begun while busy ends
// first), plus one call (the disable).
class ProtectionPolicy {
 public:
  // `expires` (1..2880 minutes) is each call's ExpiresInMinutes; `hold`
  // (>= 0) how long protection stays on after the docket empties;
  // `call_timeout` bounds each agent call.
  ProtectionPolicy(Duration expires, Duration hold,
                   Duration call_timeout = kAgentCallTimeout);

  // SetBusy records the docket's state at `now`; the busy -> idle edge
  // starts the hold. Repeating a state changes nothing.
  void SetBusy(TimePoint now, bool busy);
  // Due returns the call due at `now` (true: enable, false: disable), or
  // nullopt: none (the agent has the wanted state already and no renewal
  // is due, or a failed call waits for its retry). After a failure the
  // agent's state is unknown, so the wanted state is sent again even if it
  // matches the last one applied: at the retry, or at once when it changed
  // since the failed call.
  std::optional<bool> Due(TimePoint now) const;
  // Next returns when, after `now`, a call may next fall due without an
  // edge (a renewal, a retry, the hold's end); TimePoint::max() if none
  // will.
  TimePoint Next(TimePoint now) const;
  // Applied records a call that succeeded at `now`.
  void Applied(TimePoint now, bool enabled);
  // Failed records that the call for `attempted` failed at `now` and
  // returns the delay until its retry.
  Duration Failed(TimePoint now, bool attempted);

  bool enabled() const { return enabled_; }
  // failures returns the failed calls in a row.
  int failures() const { return failures_; }

 private:
  // Wanted returns whether protection is wanted at `now`.
  bool Wanted(TimePoint now) const;
  // InHold returns whether `now` is within the hold of an idle docket
  // whose protection the agent is known to have.
  bool InHold(TimePoint now) const;

  const Duration expires_;
  const Duration hold_;
  const Duration call_timeout_;
  bool busy_ = false;  // a new worker is idle
  TimePoint hold_end_ = TimePoint::min();
  bool enabled_ = false;  // as the agent has it; a new task is unprotected
  TimePoint renew_at_ = TimePoint::max();
  TimePoint retry_at_ = TimePoint::min();
  int failures_ = 0;
  bool attempted_ = false;  // the state of the call that failed last
  Backoff backoff_{kAgentRetryInitialDelay, Backoff::kDefaultFactor,
                   kAgentRetryMaxDelay};
};

// ControlPlane names an orchestrator's API for the log and the metrics.
struct ControlPlane {
  std::string api;      // cfdb_worker_control_plane_calls_total's label
  std::string feature;  // each log line's prefix
  std::string peer;     // who answers, as the log says it
  std::string field;    // the JSON log's field of each state change
  // The log's text of each state change; {} in busy_text: the expiry in
  // minutes.
  std::string busy_text;
  std::string idle_text;
};

// AgentClient sets the task's (or pod's) busy state at an orchestrator.
// Implementations are called from one thread at a time.
class AgentClient {
 public:
  virtual ~AgentClient() = default;
  // SetProtection asks for `enabled` (busy) with an expiry of
  // `expires_minutes`. OK on a 2xx answer without a failure in it;
  // UNAVAILABLE (the API could not be reached or timed out, or `cancel`
  // was set) or INTERNAL (it answered with an error): retried with
  // backoff; PERMISSION_DENIED or NOT_FOUND (the API will never take it):
  // the feature turns off. Returns soon after `cancel` becomes true.
  virtual absl::Status SetProtection(bool enabled, int expires_minutes,
                                     const std::atomic<bool>& cancel) = 0;
  // plane names the API; the same object for the client's lifetime.
  virtual const ControlPlane& plane() const = 0;
};

// CurlAgentClient calls `$ECS_AGENT_URI/task-protection/v1/state` with
// libcurl, each call bounded by `timeout`. libcurl.so.4 is loaded at the
// first call, not linked; without it every call fails with
// FAILED_PRECONDITION naming what is missing.
std::unique_ptr<AgentClient> CurlAgentClient(std::string agent_uri,
                                             Duration timeout);

// ScaleInProtection runs the policy on a thread of its own, applying the
// docket's state as Changed() last read it (from the docket's edge
// listener), and renewals, retries and the hold's end as they fall due. It
// never calls into the worker itself, so it may outlive it. Logs each state
// change, and each failure once per streak. A call the API refuses for good
// (PERMISSION_DENIED, NOT_FOUND) turns it off, with one warning: no call
// follows. Thread-safe.
class ScaleInProtection {
 public:
  // `expires` and `hold` as for ProtectionPolicy; each call of `agent`
  // should end within kAgentCallTimeout.
  ScaleInProtection(Duration expires, Duration hold,
                    std::unique_ptr<AgentClient> agent);
  // Stops the thread and joins it: at once during a retry wait, within
  // about a second for a call in flight (abandoned at libcurl's next
  // progress check).
  ~ScaleInProtection();
  ScaleInProtection(const ScaleInProtection&) = delete;
  ScaleInProtection& operator=(const ScaleInProtection&) = delete;

  // Changed reads the docket's state with `busy` under the protection's
  // lock (so of edges crossed by several threads at once, the last read,
  // which follows every edge, wins) and wakes the thread. Never waits for
  // the agent.
  void Changed(const std::function<bool()>& busy);

  // applied returns the state the agent last accepted (for tests).
  bool applied() const;
  // calls returns how many calls were made, failed_calls how many of them
  // the agent did not take (for the metrics and tests).
  int calls() const;
  int failed_calls() const;
  // off returns whether a refusal turned it off.
  bool off() const;
  const ControlPlane& plane() const { return agent_->plane(); }

 private:
  void Run();
  // Record takes a call's result into the policy and logs it.
  void Record(bool enable, bool renewal, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int expires_minutes_;
  const std::unique_ptr<AgentClient> agent_;
  mutable absl::Mutex mu_;
  ProtectionPolicy policy_ ABSL_GUARDED_BY(mu_);
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool off_ ABSL_GUARDED_BY(mu_) = false;
  CondVar wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cfdb::worker

// Busy-aware scale-in protection: the policy on simulated time, and the
// runner against an in-process agent that can fail or hang.
#include "serve/scale_in.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

const TimePoint kStart = TimePoint() + hours(1000);
constexpr Duration kTick = std::chrono::nanoseconds(1);
constexpr Duration kHold = seconds(60);

// A policy of the default expiry and hold, busy and enabled at kStart.
ProtectionPolicy Protected() {
  ProtectionPolicy policy(minutes(120), kHold);
  policy.SetBusy(kStart, true);
  policy.Applied(kStart, true);
  return policy;
}

TEST(ProtectionPolicyTest, EnablesOnTheBusyEdgeAndDisablesAfterTheHold) {
  ProtectionPolicy policy(minutes(120), kHold);
  EXPECT_EQ(policy.Due(kStart), std::nullopt) << "a new task is idle";
  EXPECT_EQ(policy.Next(kStart), TimePoint::max());
  policy.SetBusy(kStart, true);
  ASSERT_EQ(policy.Due(kStart), true);
  policy.Applied(kStart, true);
  EXPECT_EQ(policy.Due(kStart + minutes(1)), std::nullopt)
      << "jobs overlapping: no call per job";
  const TimePoint idle = kStart + minutes(2);
  policy.SetBusy(idle, false);
  EXPECT_EQ(policy.Due(idle), std::nullopt) << "the hold begins";
  EXPECT_EQ(policy.Due(idle + kHold - kTick), std::nullopt);
  EXPECT_EQ(policy.Next(idle), idle + kHold);
  ASSERT_EQ(policy.Due(idle + kHold), false) << "the hold is over";
  policy.Applied(idle + kHold, false);
  EXPECT_EQ(policy.Due(idle + hours(10)), std::nullopt);
  EXPECT_EQ(policy.Next(idle + hours(10)), TimePoint::max())
      << "idle: nothing to renew";
}

// A job that arrives within the hold costs no call, and the next idle edge
// starts a new hold.
TEST(ProtectionPolicyTest, AJobWithinTheHoldCostsNoCall) {
  ProtectionPolicy policy = Protected();
  const TimePoint idle = kStart + seconds(1);
  policy.SetBusy(idle, false);
  policy.SetBusy(idle + kHold - kTick, true);
  EXPECT_EQ(policy.Due(idle + kHold - kTick), std::nullopt);
  EXPECT_EQ(policy.Due(idle + kHold), std::nullopt) << "busy: no hold to end";
  const TimePoint again = idle + kHold + seconds(1);
  policy.SetBusy(again, false);
  policy.SetBusy(again + seconds(5), false);  // a repeat moves nothing
  EXPECT_EQ(policy.Due(again + kHold - kTick), std::nullopt);
  EXPECT_EQ(policy.Due(again + kHold), false);
}

TEST(ProtectionPolicyTest, AZeroHoldDisablesOnTheIdleEdge) {
  ProtectionPolicy policy(minutes(120), Duration::zero());
  policy.SetBusy(kStart, true);
  policy.Applied(kStart, true);
  policy.SetBusy(kStart + seconds(1), false);
  EXPECT_EQ(policy.Due(kStart + seconds(1)), false);
}

// A 6-hour job under a 120-minute expiry: renewed every hour, and never
// unprotected.
TEST(ProtectionPolicyTest, ASixHourJobStaysProtected) {
  ProtectionPolicy policy = Protected();
  TimePoint last = kStart;
  int renewals = 0;
  for (TimePoint now = kStart; now <= kStart + hours(6); now += minutes(1)) {
    ASSERT_LT(now - last, minutes(120)) << "the protection would lapse";
    if (policy.Due(now) == true) {
      policy.Applied(now, true);
      last = now;
      ++renewals;
    }
  }
  EXPECT_EQ(renewals, 6) << "at 1 h, 2 h, ... 6 h";
  EXPECT_EQ(policy.Next(kStart + hours(6)), last + minutes(60));
}

// In the hold a renewal goes out only if it ends (one call timeout later)
// before the hold does; otherwise the protection, an hour from lapsing,
// lasts to the hold's end without it.
TEST(ProtectionPolicyTest, InTheHoldARenewalMustEndBeforeTheHoldDoes) {
  const TimePoint renew_at = kStart + minutes(60);
  // Idle edges that put the hold's end one call after the renewal point,
  // and a tick less.
  const TimePoint fits = renew_at + kAgentCallTimeout - kHold;
  for (const TimePoint idle : {fits, fits - kTick}) {
    ProtectionPolicy policy = Protected();
    policy.SetBusy(idle, false);
    const TimePoint hold_end = idle + kHold;
    EXPECT_EQ(policy.Due(renew_at - kTick), std::nullopt);
    if (idle == fits) {
      EXPECT_EQ(policy.Next(renew_at - kTick), renew_at);
      EXPECT_EQ(policy.Due(renew_at), true) << "it ends within the hold";
    } else {
      EXPECT_EQ(policy.Next(renew_at - kTick), hold_end);
      EXPECT_EQ(policy.Due(renew_at), std::nullopt) << "it would not";
      EXPECT_EQ(policy.Due(hold_end - kTick), std::nullopt);
      EXPECT_EQ(policy.Due(hold_end), false);
    }
  }
}

// A failed call waits for its backoff, then is retried with the wanted
// state at the time; success resets the backoff.
TEST(ProtectionPolicyTest, AFailureIsRetriedAfterTheBackoff) {
  ProtectionPolicy policy(minutes(120), kHold);
  policy.SetBusy(kStart, true);
  ASSERT_EQ(policy.Due(kStart), true);
  const Duration first = policy.Failed(kStart, true);
  EXPECT_EQ(first, kAgentRetryInitialDelay);
  EXPECT_EQ(policy.Due(kStart + first - kTick), std::nullopt);
  EXPECT_EQ(policy.Next(kStart), kStart + first);
  EXPECT_EQ(policy.Due(kStart + first), true);
  EXPECT_EQ(policy.Failed(kStart + first, true), 2 * first) << "backing off";
  EXPECT_EQ(policy.Due(kStart + 3 * first), true);
  policy.Applied(kStart + 3 * first, true);
  EXPECT_TRUE(policy.enabled());
  EXPECT_EQ(policy.failures(), 0);
  policy.SetBusy(kStart + 4 * first, false);
  ASSERT_EQ(policy.Due(kStart + 4 * first + kHold), false);
  EXPECT_EQ(policy.Failed(kStart + 4 * first + kHold, false), first)
      << "backoff reset";
}

// An enable that timed out may still have been applied: once the docket
// is idle, a disable goes out at once (neither after the backoff nor after
// a hold), although the last state the agent took was "disabled". Never an
// idle task left protected for the expiry.
TEST(ProtectionPolicyTest, AfterAFailedEnableAnIdleTaskIsDisabledAtOnce) {
  ProtectionPolicy policy(minutes(120), kHold);
  policy.SetBusy(kStart, true);
  ASSERT_EQ(policy.Due(kStart), true);
  policy.Failed(kStart, true);
  policy.SetBusy(kStart + milliseconds(1), false);
  EXPECT_EQ(policy.Due(kStart + milliseconds(1)), false)
      << "the wanted state changed since the failed call: at once";
  policy.Applied(kStart + milliseconds(2), false);
  EXPECT_EQ(policy.Due(kStart + seconds(5)), std::nullopt);
  EXPECT_EQ(policy.Next(kStart + seconds(5)), TimePoint::max());
}

// A renewal that fails in the hold leaves the state unknown: the hold ends
// there, and the disable goes out at once.
TEST(ProtectionPolicyTest, AFailureInTheHoldEndsIt) {
  ProtectionPolicy policy = Protected();
  const TimePoint renew_at = kStart + minutes(60);
  policy.SetBusy(renew_at - seconds(10), false);
  ASSERT_EQ(policy.Due(renew_at), true);
  policy.Failed(renew_at + seconds(1), true);
  EXPECT_EQ(policy.Due(renew_at + seconds(1)), false);
}

// Hours of a job stream on simulated time, with every agent call taking a
// different time up to its timeout: the fleet-level promise holds at every
// step. While busy past two calls (a disable begun while idle, then the
// enable), the agent has protection on and unexpired; once idle past the
// longer of the hold and one call (an enable or renewal begun while busy),
// plus one call (the disable), it has it off.
TEST(ProtectionPolicyTest, AJobStreamKeepsTheBoundsAtEveryStep) {
  for (const Duration hold : {Duration::zero(), Duration(seconds(3)), kHold}) {
    SCOPED_TRACE(ToSeconds(hold));
    ProtectionPolicy policy(minutes(2), hold);  // renewals every minute
    const Duration call = kAgentCallTimeout;
    const Duration step = milliseconds(100);
    bool busy = false;
    TimePoint edge = kStart;  // of the docket's last change
    bool agent_on = false;
    TimePoint agent_expires = TimePoint::min();
    bool calling = false;  // a call in flight, for `sending`
    bool sending = false;
    TimePoint call_ends = kStart;
    int disables = 0;
    uint32_t random = 12345;
    for (TimePoint now = kStart; now < kStart + hours(3); now += step) {
      random = random * 1103515245 + 12345;
      // Busy spells of up to 3 minutes, idle ones of up to 2.
      const bool flip = (random >> 16) % (busy ? 1800 : 1200) == 0;
      if (flip) {
        busy = !busy;
        edge = now;
        policy.SetBusy(now, busy);
      }
      if (calling && now >= call_ends) {
        agent_on = sending;
        agent_expires = now + minutes(2);
        policy.Applied(now, sending);
        disables += sending ? 0 : 1;
        calling = false;
      }
      if (!calling) {
        if (std::optional<bool> due = policy.Due(now)) {
          calling = true;
          sending = *due;
          call_ends = now + call * ((random >> 8) % 11) / 10;
        }
      }
      const bool protected_now = agent_on && now < agent_expires;
      if (busy && now - edge > 2 * call) {
        ASSERT_TRUE(protected_now) << "busy, unprotected";
      }
      if (!busy && now - edge > std::max(hold, call) + call) {
        ASSERT_FALSE(protected_now) << "idle, still protected";
      }
    }
    EXPECT_GT(disables, 10);
  }
}

// FakeAgent records calls; it can fail the first ones or hold a call until
// released.
class FakeAgent final : public AgentClient {
 public:
  struct Shared {
    absl::Mutex mu;
    std::vector<bool> calls ABSL_GUARDED_BY(mu);
    int fail_first ABSL_GUARDED_BY(mu) = 0;
    absl::StatusCode fail_with ABSL_GUARDED_BY(mu) =
        absl::StatusCode::kInternal;
    bool hold ABSL_GUARDED_BY(mu) = false;
    bool holding ABSL_GUARDED_BY(mu) = false;
  };
  explicit FakeAgent(Shared& shared) : shared_(shared) {}
  absl::Status SetProtection(bool enabled, int expires_minutes,
                             const std::atomic<bool>& cancel) override {
    EXPECT_EQ(expires_minutes, 120);
    absl::MutexLock lock(&shared_.mu);
    shared_.holding = true;
    while (shared_.hold && !cancel) {
      shared_.mu.AwaitWithTimeout(
          absl::Condition(
              +[](bool* hold) { return !*hold; }, &shared_.hold),
          absl::Milliseconds(10));
    }
    shared_.holding = false;
    shared_.calls.push_back(enabled);
    if (cancel) return absl::UnavailableError("abandoned");
    if (shared_.fail_first > 0) {
      --shared_.fail_first;
      return absl::Status(shared_.fail_with, "HTTP 500");
    }
    return absl::OkStatus();
  }
  const ControlPlane& plane() const override {
    static const ControlPlane kFake{.api = "fake", .feature = "fake"};
    return kFake;
  }

 private:
  Shared& shared_;
};

class ScaleInProtectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<ScaleInProtection> Start() {
    return std::make_unique<ScaleInProtection>(
        minutes(120), Duration::zero(), std::make_unique<FakeAgent>(shared_));
  }
  std::vector<bool> Calls() {
    absl::MutexLock lock(&shared_.mu);
    return shared_.calls;
  }
  void Set(ScaleInProtection& p, bool busy) {
    p.Changed([busy] { return busy; });
  }
  FakeAgent::Shared shared_;
};

TEST_F(ScaleInProtectionTest, OneEnableAndOneDisableForOverlappingJobs) {
  auto protection = Start();
  Set(*protection, true);  // first job
  Set(*protection, true);  // a second job arriving (no edge in the docket,
                           // but a repeat must not call either)
  ASSERT_TRUE(test_support::WaitFor([&] { return Calls().size() == 1; }));
  Set(*protection, false);  // the last job left
  ASSERT_TRUE(test_support::WaitFor([&] { return Calls().size() == 2; }));
  EXPECT_FALSE(protection->applied());
  protection.reset();  // joined: no call can follow
  EXPECT_EQ(Calls(), (std::vector<bool>{true, false}));
}

// 500 then 200: retried after the backoff, and ends enabled.
TEST_F(ScaleInProtectionTest, AFailedEnableIsRetriedUntilItTakes) {
  {
    absl::MutexLock lock(&shared_.mu);
    shared_.fail_first = 1;
  }
  auto protection = Start();
  Set(*protection, true);
  ASSERT_TRUE(test_support::WaitFor([&] { return protection->applied(); },
                                    seconds(10)));
  EXPECT_EQ(Calls(), (std::vector<bool>{true, true}));
}

// A refusal for good (403, 404) turns it off: no call follows, busy or
// idle; a transient error does not (above).
TEST_F(ScaleInProtectionTest, ARefusalForGoodTurnsItOff) {
  for (const absl::StatusCode code :
       {absl::StatusCode::kPermissionDenied, absl::StatusCode::kNotFound}) {
    {
      absl::MutexLock lock(&shared_.mu);
      shared_.calls.clear();
      shared_.fail_first = 1;
      shared_.fail_with = code;
    }
    auto protection = Start();
    Set(*protection, true);
    ASSERT_TRUE(test_support::WaitFor([&] { return protection->off(); }));
    Set(*protection, false);
    Set(*protection, true);
    protection.reset();  // joined: no call can follow
    EXPECT_EQ(Calls(), (std::vector<bool>{true})) << code;
  }
}

// An agent that hangs holds neither the edge listener nor anything else;
// once it answers, the state the docket has then is applied: busy -> idle
// -> busy during the hang ends enabled, and an idle end ends disabled.
TEST_F(ScaleInProtectionTest, AHangingAgentHoldsNothingAndTheLatestStateWins) {
  {
    absl::MutexLock lock(&shared_.mu);
    shared_.hold = true;
  }
  auto protection = Start();
  Set(*protection, true);
  ASSERT_TRUE(test_support::WaitFor([&] {
    absl::MutexLock lock(&shared_.mu);
    return shared_.holding;
  }));
  const auto before = std::chrono::steady_clock::now();
  Set(*protection, false);
  Set(*protection, true);
  EXPECT_LT(std::chrono::steady_clock::now() - before, seconds(5))
      << "the listener waited for the agent (it holds until released)";
  {
    absl::MutexLock lock(&shared_.mu);
    shared_.hold = false;
  }
  ASSERT_TRUE(test_support::WaitFor([&] { return protection->applied(); }));
  Set(*protection, false);
  ASSERT_TRUE(test_support::WaitFor([&] { return !protection->applied(); }));
  // Calls are recorded in order: none came between the enable and this
  // disable (busy again after the hang needed no call).
  EXPECT_EQ(Calls(), (std::vector<bool>{true, false}));
}

// Shutdown ends a retry wait (and a call in flight) at once.
TEST_F(ScaleInProtectionTest, ShutdownDuringARetryWaitIsImmediate) {
  {
    absl::MutexLock lock(&shared_.mu);
    shared_.fail_first = 1000;
  }
  auto protection = Start();
  Set(*protection, true);
  ASSERT_TRUE(test_support::WaitFor([&] { return Calls().size() >= 2; },
                                    seconds(10)));  // in the 2 s wait now
  const auto before = std::chrono::steady_clock::now();
  protection.reset();
  // Not the rest of the 2 s wait.
  EXPECT_LT(std::chrono::steady_clock::now() - before, seconds(1));
}

}  // namespace
}  // namespace cfdb::worker

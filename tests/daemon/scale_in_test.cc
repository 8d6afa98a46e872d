// Busy-aware scale-in protection: the policy on simulated time, and the
// runner against an in-process agent that can fail or hang.
#include "daemon/scale_in.h"

#include <atomic>
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

TEST(ProtectionPolicyTest, EnablesOnTheBusyEdgeAndDisablesOnTheIdleEdge) {
  ProtectionPolicy policy(minutes(120));
  EXPECT_EQ(policy.Due(kStart, false), std::nullopt) << "a new task is idle";
  EXPECT_EQ(policy.Next(), TimePoint::max());
  ASSERT_EQ(policy.Due(kStart, true), true);
  policy.Applied(kStart, true);
  EXPECT_EQ(policy.Due(kStart + minutes(1), true), std::nullopt)
      << "jobs overlapping: no call per job";
  ASSERT_EQ(policy.Due(kStart + minutes(2), false), false);
  policy.Applied(kStart + minutes(2), false);
  EXPECT_EQ(policy.Due(kStart + hours(10), false), std::nullopt);
  EXPECT_EQ(policy.Next(), TimePoint::max()) << "idle: nothing to renew";
}

// A 6-hour job under a 120-minute expiry: renewed every hour, and never
// unprotected.
TEST(ProtectionPolicyTest, ASixHourJobStaysProtected) {
  ProtectionPolicy policy(minutes(120));
  policy.Applied(kStart, true);
  TimePoint last = kStart;
  int renewals = 0;
  for (TimePoint now = kStart; now <= kStart + hours(6); now += minutes(1)) {
    ASSERT_LT(now - last, minutes(120)) << "the protection would lapse";
    if (policy.Due(now, true) == true) {
      policy.Applied(now, true);
      last = now;
      ++renewals;
    }
  }
  EXPECT_EQ(renewals, 6) << "at 1 h, 2 h, ... 6 h";
  EXPECT_EQ(policy.Next(), last + minutes(60));
}

// A failed call waits for its backoff, then is retried with the state of
// the docket at the time; success resets the backoff.
TEST(ProtectionPolicyTest, AFailureIsRetriedAfterTheBackoff) {
  ProtectionPolicy policy(minutes(120));
  ASSERT_EQ(policy.Due(kStart, true), true);
  const Duration first = policy.Failed(kStart, true);
  EXPECT_EQ(first, kAgentRetryInitialDelay);
  EXPECT_EQ(policy.Due(kStart + first / 2, true), std::nullopt);
  EXPECT_EQ(policy.Next(), kStart + first);
  EXPECT_EQ(policy.Due(kStart + first, true), true);
  EXPECT_EQ(policy.Failed(kStart + first, true), 2 * first) << "backing off";
  EXPECT_EQ(policy.Due(kStart + 3 * first, true), true);
  policy.Applied(kStart + 3 * first, true);
  EXPECT_TRUE(policy.enabled());
  EXPECT_EQ(policy.failures(), 0);
  ASSERT_EQ(policy.Due(kStart + 4 * first, false), false);
  EXPECT_EQ(policy.Failed(kStart + 4 * first, false), first) << "backoff reset";
}

// An enable that timed out may still have been applied: once the docket
// is idle, a disable goes out at once (not after the backoff), although
// the last state the agent took was "disabled". Never an idle task left
// protected for the expiry.
TEST(ProtectionPolicyTest, AfterAFailureTheDocketsStateIsSentAgain) {
  ProtectionPolicy policy(minutes(120));
  ASSERT_EQ(policy.Due(kStart, true), true);
  policy.Failed(kStart, true);
  EXPECT_EQ(policy.Due(kStart + milliseconds(1), false), false)
      << "the docket changed since the failed call: at once";
  policy.Applied(kStart + milliseconds(2), false);
  EXPECT_EQ(policy.Due(kStart + seconds(5), false), std::nullopt);
  EXPECT_EQ(policy.Next(), TimePoint::max());
}

// FakeAgent records calls; it can fail the first ones or hold a call until
// released.
class FakeAgent final : public AgentClient {
 public:
  struct Shared {
    absl::Mutex mu;
    std::vector<bool> calls ABSL_GUARDED_BY(mu);
    int fail_first ABSL_GUARDED_BY(mu) = 0;
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
      return absl::InternalError("HTTP 500");
    }
    return absl::OkStatus();
  }

 private:
  Shared& shared_;
};

class ScaleInProtectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<ScaleInProtection> Start() {
    return std::make_unique<ScaleInProtection>(
        minutes(120), std::make_unique<FakeAgent>(shared_));
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
  ASSERT_TRUE(testing::WaitFor([&] { return Calls().size() == 1; }));
  Set(*protection, false);  // the last job left
  ASSERT_TRUE(testing::WaitFor([&] { return Calls().size() == 2; }));
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
  ASSERT_TRUE(
      testing::WaitFor([&] { return protection->applied(); }, seconds(10)));
  EXPECT_EQ(Calls(), (std::vector<bool>{true, true}));
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
  ASSERT_TRUE(testing::WaitFor([&] {
    absl::MutexLock lock(&shared_.mu);
    return shared_.holding;
  }));
  const auto before = std::chrono::steady_clock::now();
  Set(*protection, false);
  Set(*protection, true);
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(500))
      << "the listener did not wait for the agent";
  {
    absl::MutexLock lock(&shared_.mu);
    shared_.hold = false;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return protection->applied(); }));
  Set(*protection, false);
  ASSERT_TRUE(testing::WaitFor([&] { return !protection->applied(); }));
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
  ASSERT_TRUE(testing::WaitFor([&] { return Calls().size() >= 2; },
                               seconds(10)));  // in the 2 s wait now
  const auto before = std::chrono::steady_clock::now();
  protection.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(500));
}

}  // namespace
}  // namespace cfdb::worker

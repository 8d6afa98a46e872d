#include "serve/backoff.h"

#include <thread>

#include "cfdb/worker/shutdown.h"
#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

TEST(BackoffTest, FailedReturnsThisFailuresDelayThenDoubles) {
  Backoff backoff;
  EXPECT_EQ(backoff.Failed(), seconds(5));
  EXPECT_EQ(backoff.Failed(), seconds(10));
  EXPECT_EQ(backoff.Failed(), seconds(20));
  EXPECT_EQ(backoff.delay(), seconds(20));
}

TEST(BackoffTest, ReachesTheCeilingAndStaysThere) {
  Backoff backoff;
  Duration last{};
  for (int i = 0; i < 20; ++i) last = backoff.Failed();
  EXPECT_EQ(last, minutes(15));
}

TEST(BackoffTest, NoOverflowAfterAThousandFailures) {
  Backoff backoff(seconds(1), 10, std::chrono::hours(24 * 365 * 100));
  for (int i = 0; i < 1000; ++i) {
    const Duration d = backoff.Failed();
    ASSERT_GT(d, Duration::zero()) << "failure " << i;
    ASSERT_LE(d, std::chrono::hours(24 * 365 * 100)) << "failure " << i;
  }
}

TEST(BackoffTest, InitialDelayAboveTheCeilingIsClamped) {
  Backoff backoff(minutes(30), 2, minutes(15));
  EXPECT_EQ(backoff.Failed(), minutes(15));
  EXPECT_EQ(backoff.Failed(), minutes(15)) << "never counts downwards";
}

TEST(BackoffTest, FactorZeroIsTreatedAsOne) {
  Backoff backoff(seconds(3), 0, minutes(1));
  EXPECT_EQ(backoff.Failed(), seconds(3));
  EXPECT_EQ(backoff.Failed(), seconds(3)) << "not zero: no instant retries";
}

TEST(BackoffTest, SucceededResets) {
  Backoff backoff;
  backoff.Failed();
  backoff.Failed();
  backoff.Succeeded();
  EXPECT_EQ(backoff.Failed(), seconds(5));
}

TEST(BackoffTest, WaitRunsOnTheGivenClock) {
  FakeClock clock;
  Shutdown shutdown;
  Backoff backoff;
  backoff.Failed();
  const TimePoint start = clock.Now();
  EXPECT_TRUE(backoff.Wait(shutdown.watcher(), clock));
  EXPECT_EQ(clock.Now() - start, seconds(5));
}

TEST(BackoffTest, WaitIsAbandonedAtOnceWhenAlreadyStopped) {
  Shutdown shutdown;
  shutdown.Stop();
  Backoff backoff;
  for (int i = 0; i < 20; ++i) backoff.Failed();
  EXPECT_FALSE(backoff.Wait(shutdown.watcher()));
}

TEST(BackoffTest, StopDuringAFifteenMinuteWaitEndsItLongBefore) {
  Shutdown shutdown;
  Backoff backoff;
  for (int i = 0; i < 20; ++i) backoff.Failed();
  const TimePoint start = std::chrono::steady_clock::now();
  std::thread stopper([&] { shutdown.Stop(); });
  EXPECT_FALSE(backoff.Wait(shutdown.watcher()));
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, minutes(1));
}

TEST(BackoffTest, ZeroDelayReturnsWithoutWaiting) {
  FakeClock clock;
  Shutdown shutdown;
  Backoff backoff(Duration::zero(), 2, Duration::zero());
  backoff.Failed();
  EXPECT_TRUE(backoff.Wait(shutdown.watcher(), clock));
  EXPECT_EQ(clock.waits(), 0);
}

}  // namespace
}  // namespace cfdb::worker

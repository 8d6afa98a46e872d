#include "cfdb/worker/shutdown.h"

#include <csignal>
#include <thread>

#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

TEST(ShutdownTest, StopIsSeenByEveryWatcherAndTheFirstCauseWins) {
  Shutdown shutdown;
  Watcher a = shutdown.watcher(), b = shutdown.watcher();
  EXPECT_FALSE(a.stop_requested());
  shutdown.Stop(StopCause::kStopRpc);
  shutdown.Stop(StopCause::kSignal);
  EXPECT_TRUE(a.stop_requested());
  EXPECT_EQ(b.cause(), StopCause::kStopRpc);
}

TEST(ShutdownTest, DestroyingAShutdownStopsNothing) {
  std::optional<Watcher> watcher;
  {
    Shutdown shutdown;
    watcher = shutdown.watcher();
  }
  EXPECT_FALSE(watcher->stop_requested());
}

TEST(ShutdownTest, WaitWakesAtOnceOnAStopFromAnotherThread) {
  Shutdown shutdown;
  const TimePoint start = std::chrono::steady_clock::now();
  std::thread stopper([&] { shutdown.Stop(); });
  const bool deadline_passed =
      shutdown.watcher().WaitUntil(start + std::chrono::hours(1));
  stopper.join();
  EXPECT_FALSE(deadline_passed);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
}

TEST(ShutdownTest, WaitReturnsTrueAtTheDeadline) {
  Shutdown shutdown;
  EXPECT_TRUE(shutdown.watcher().WaitUntil(std::chrono::steady_clock::now()));
}

// A wake ends a wait without a stop; one that came before the wait is not
// lost, and is seen once.
TEST(ShutdownTest, WakeEndsAWaitWithoutAStop) {
  Shutdown shutdown;
  Watcher watcher = shutdown.watcher();
  const TimePoint start = std::chrono::steady_clock::now();
  std::thread waker([&] { shutdown.Wake(); });
  EXPECT_TRUE(watcher.WaitUntil(start + std::chrono::hours(1)));
  waker.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
  EXPECT_FALSE(watcher.stop_requested());
  shutdown.Wake();
  EXPECT_TRUE(watcher.WaitUntil(start + std::chrono::hours(1)))
      << "a wake before the wait ends it at once";
  const TimePoint again = std::chrono::steady_clock::now();
  EXPECT_TRUE(watcher.WaitUntil(again + std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - again,
            std::chrono::milliseconds(20))
      << "seen once: the next wait runs to its deadline";
}

TEST(ShutdownTest, SigtermRequestsAStopAndEverySignalCallsBack) {
  Shutdown shutdown;
  std::atomic<int> repeats{0};
  std::atomic<int> last_signal{0};
  ASSERT_TRUE(shutdown
                  .ListenForSignals([&](int signo, int count) {
                    last_signal = signo;
                    repeats = count;
                  })
                  .ok());
  EXPECT_EQ(shutdown.ListenForSignals().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  Watcher watcher = shutdown.watcher();
  EXPECT_FALSE(watcher.WaitUntil(std::chrono::steady_clock::now() +
                                 std::chrono::seconds(30)));
  EXPECT_EQ(watcher.cause(), StopCause::kSignal);
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  const TimePoint give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (repeats.load() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(repeats.load(), 2);
  EXPECT_EQ(last_signal.load(), SIGINT);
}

}  // namespace
}  // namespace cfdb::worker

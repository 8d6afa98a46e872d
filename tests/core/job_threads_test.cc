// JobThreads: reuse, no waiting behind a busy thread, the limit, nice.
#include "core/job_threads.h"

#include <sys/resource.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// WaitParked waits until every thread of `threads` waits for a task;
// false after 30 s.
bool WaitParked(const JobThreads& threads) {
  return test_support::WaitFor(
      [&] { return threads.parked() == threads.threads(); });
}

TEST(JobThreadsTest, SequentialTasksReuseOneParkedThread) {
  JobThreads threads(4, 0);
  std::mutex mu;  // orders ran_on for TSan, which cannot see into abseil
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 20; ++i) {
    absl::Notification done;
    ASSERT_TRUE(threads.Post([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ran_on.insert(std::this_thread::get_id());
      }
      done.Notify();
    }));
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTimeout));
    ASSERT_TRUE(WaitParked(threads));
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(threads.threads(), 1u);
}

TEST(JobThreadsTest, ATaskNeverWaitsBehindABusyThread) {
  JobThreads threads(2, 0);
  absl::Notification release_first, second_ran;
  ASSERT_TRUE(threads.Post([&] { release_first.WaitForNotification(); }));
  ASSERT_TRUE(threads.Post([&] { second_ran.Notify(); }));
  EXPECT_TRUE(second_ran.WaitForNotificationWithTimeout(kTimeout))
      << "the second task waited for the first";
  EXPECT_EQ(threads.threads(), 2u);
  release_first.Notify();
}

// A docket lets the next job in as soon as the last one is released, which
// is before its thread has parked again: at the limit the task must wait
// for that thread, not be refused.
TEST(JobThreadsTest, AtTheLimitATaskGoesToTheThreadFinishingItsTask) {
  JobThreads threads(1, 0);
  absl::Notification released, posted, second_ran;
  ASSERT_TRUE(threads.Post([&] {
    released.Notify();             // the docket's Release
    posted.WaitForNotification();  // the thread is not parked yet
  }));
  ASSERT_TRUE(released.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_TRUE(threads.Post([&] { second_ran.Notify(); }));
  posted.Notify();
  EXPECT_TRUE(second_ran.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_EQ(threads.threads(), 1u);
}

TEST(JobThreadsTest, DestructionRunsWhatIsQueuedAndJoins) {
  std::atomic<int> ran{0};
  {
    // One thread held by the first task, so the other two wait in the queue
    // until it is let go just before the pool is destroyed.
    JobThreads threads(1, 0);
    absl::Notification go;
    ASSERT_TRUE(threads.Post([&] {
      go.WaitForNotification();
      ++ran;
    }));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(threads.Post([&] { ++ran; }));
    go.Notify();
  }
  EXPECT_EQ(ran.load(), 3);
}

TEST(JobThreadsTest, AddsItsNiceToTheThreadsItRunsTasksOn) {
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  if (base > 16) GTEST_SKIP() << "the test runs at nice " << base;
  JobThreads threads(1, 3);
  std::atomic<int> seen{-100};
  absl::Notification done;
  ASSERT_TRUE(threads.Post([&] {
    seen = getpriority(PRIO_PROCESS, 0);
    done.Notify();
  }));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kTimeout));
  EXPECT_EQ(seen.load(), base + 3);
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), base) << "the caller is untouched";
}

}  // namespace
}  // namespace cfdb::worker

#include "cfdb/worker/docket.h"

#include <vector>

#include "cfdb/worker/shutdown.h"
#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;

class FakeJob : public Cancellable {
 public:
  void Cancel() override { ++cancels; }
  int cancels = 0;
};

class DocketTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Docket docket_{clock_, 3};
};

TEST_F(DocketTest, StartupCountsAsBecomingEmpty) {
  EXPECT_EQ(docket_.Idle(), Duration::zero());
  clock_.Advance(seconds(5));
  EXPECT_EQ(docket_.Idle(), seconds(5));
}

TEST_F(DocketTest, IdleStaysZeroUntilTheLastJobLeavesThenAccrues) {
  clock_.Advance(seconds(100));
  std::vector<FakeJob> jobs(3);
  for (FakeJob& job : jobs) ASSERT_TRUE(docket_.Admit(&job).ok());
  for (FakeJob& job : jobs) {
    clock_.Advance(seconds(7));
    EXPECT_EQ(docket_.Idle(), Duration::zero()) << "a job is still in flight";
    docket_.Release(&job);
  }
  EXPECT_EQ(docket_.Idle(), Duration::zero()) << "the last job just left";
  clock_.Advance(seconds(2));
  EXPECT_EQ(docket_.Idle(), seconds(2));
}

// Overlapping jobs make one busy edge and one empty edge; refused admits
// make none.
TEST_F(DocketTest, EdgesAreReportedOncePerEdgeNotPerJob) {
  std::vector<std::size_t> seen;  // in_flight() at each edge
  docket_.OnEdge([&] { seen.push_back(docket_.in_flight()); });
  std::vector<FakeJob> jobs(3);
  for (FakeJob& job : jobs) ASSERT_TRUE(docket_.Admit(&job).ok());
  FakeJob extra;
  EXPECT_FALSE(docket_.Admit(&extra).ok()) << "full";
  for (FakeJob& job : jobs) docket_.Release(&job);
  EXPECT_EQ(seen, (std::vector<std::size_t>{1, 0}));
  ASSERT_TRUE(docket_.Admit(&jobs[0]).ok());
  docket_.Release(&jobs[0]);
  EXPECT_EQ(seen, (std::vector<std::size_t>{1, 0, 1, 0}));
}

TEST_F(DocketTest, ReadingIdleNeverMovesTheTimestamp) {
  clock_.Advance(seconds(3));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(docket_.Idle(), seconds(3));
}

TEST_F(DocketTest, RefusedAdmitsDoNotResetIdle) {
  std::vector<FakeJob> jobs(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(docket_.Admit(&jobs[i]).ok());
  EXPECT_EQ(docket_.Admit(&jobs[3]).code(),
            absl::StatusCode::kResourceExhausted);
  for (int i = 0; i < 3; ++i) docket_.Release(&jobs[i]);
  clock_.Advance(seconds(10));

  // Full and closed dockets refuse without touching the idle clock.
  docket_.Close();
  EXPECT_EQ(docket_.Admit(&jobs[3]).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(docket_.Idle(), seconds(10));
  EXPECT_EQ(docket_.in_flight(), 0u);
}

TEST_F(DocketTest, FullDocketRefusesTheNextJobWithResourceExhausted) {
  std::vector<FakeJob> jobs(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(docket_.Admit(&jobs[i]).ok());
  EXPECT_EQ(docket_.Admit(&jobs[3]).code(),
            absl::StatusCode::kResourceExhausted);
  docket_.Release(&jobs[0]);
  EXPECT_TRUE(docket_.Admit(&jobs[3]).ok()) << "room again after a release";
}

TEST_F(DocketTest, ReleasingAnUnknownJobChangesNothing) {
  FakeJob in, stranger;
  ASSERT_TRUE(docket_.Admit(&in).ok());
  clock_.Advance(seconds(4));
  docket_.Release(&stranger);
  EXPECT_EQ(docket_.in_flight(), 1u);
  EXPECT_EQ(docket_.Idle(), Duration::zero());
}

TEST_F(DocketTest, CancelAllCancelsEveryJobInFlight) {
  std::vector<FakeJob> jobs(2);
  for (FakeJob& job : jobs) ASSERT_TRUE(docket_.Admit(&job).ok());
  EXPECT_EQ(docket_.CancelAll(), 2u);
  for (FakeJob& job : jobs) EXPECT_EQ(job.cancels, 1);
}

TEST_F(DocketTest, WaitEmptyUntilReportsWhetherTheDocketEmptied) {
  FakeJob job;
  EXPECT_TRUE(docket_.WaitEmptyUntil(std::chrono::steady_clock::now()));
  ASSERT_TRUE(docket_.Admit(&job).ok());
  EXPECT_FALSE(docket_.WaitEmptyUntil(std::chrono::steady_clock::now()));
  docket_.Release(&job);
  EXPECT_TRUE(docket_.WaitEmptyUntil(TimePoint::max()));
}

TEST(FakeClockTest, WaitJumpsToTheDeadlineUnlessStopped) {
  FakeClock clock;
  Shutdown shutdown;
  const TimePoint start = clock.Now();
  EXPECT_TRUE(clock.WaitUntil(start + seconds(900), shutdown.watcher()));
  EXPECT_EQ(clock.Now() - start, seconds(900));
  shutdown.Stop();
  EXPECT_FALSE(clock.WaitUntil(clock.Now() + seconds(1), shutdown.watcher()));
  EXPECT_EQ(clock.Now() - start, seconds(900))
      << "a stopped wait does not jump";
}

}  // namespace
}  // namespace cfdb::worker

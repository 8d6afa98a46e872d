// Stop requests compose: the policy (StopRequests) on fake time points, and
// the worker's one drain with jobs that end when told.
#include "cfdb/worker/drain.h"

#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "cfdb/worker/worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::CollectingJob;
using ::testing::HasSubstr;

const TimePoint t0 = TimePoint(hours(1000));

struct Row {
  const char* name;
  StopRequest drain;   // the request that began the drain, at t0
  StopRequest second;  // arrives 1 s later
  TimePoint deadline;
  const char* deadline_source;
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

class ComposeTest : public ::testing::TestWithParam<Row> {};

// {lifetime drain, idle drain, Stop-RPC drain} x {SIGTERM with grace 0,
// SIGTERM with grace 2, a Stop RPC with a shorter grace, one with a longer
// grace}: the earliest arrival + grace wins, whatever the source.
TEST_P(ComposeTest, TheEarliestDeadlineWins) {
  const Row& row = GetParam();
  StopRequests requests;
  EXPECT_TRUE(requests.Add(row.drain));
  const TimePoint first = requests.deadline();
  const bool moved = requests.Add(row.second);
  EXPECT_EQ(moved, row.deadline < first);
  EXPECT_EQ(requests.deadline(), row.deadline);
  EXPECT_EQ(requests.deadline_source(), row.deadline_source);
  EXPECT_EQ(requests.first_arrival(), t0);
}

const TimePoint t1 = t0 + seconds(1);
const StopRequest kLifetime{"max lifetime", seconds(60), t0};
const StopRequest kIdle{"idle", seconds(60), t0};
const StopRequest kStopRpc{"stop rpc", seconds(30), t0};
const StopRequest kSigterm0{"SIGTERM", seconds(0), t1};
const StopRequest kSigterm2{"SIGTERM", seconds(2), t1};
const StopRequest kShorter{"stop rpc", seconds(5), t1};
const StopRequest kLonger{"stop rpc", seconds(600), t1};

INSTANTIATE_TEST_SUITE_P(
    Drains, ComposeTest,
    ::testing::Values(
        Row{"lifetime+sigterm0", kLifetime, kSigterm0, t1, "SIGTERM"},
        Row{"lifetime+sigterm2", kLifetime, kSigterm2, t1 + seconds(2),
            "SIGTERM"},
        Row{"lifetime+shorter", kLifetime, kShorter, t1 + seconds(5),
            "stop rpc"},
        Row{"lifetime+longer", kLifetime, kLonger, t0 + seconds(60),
            "max lifetime"},
        Row{"idle+sigterm0", kIdle, kSigterm0, t1, "SIGTERM"},
        Row{"idle+sigterm2", kIdle, kSigterm2, t1 + seconds(2), "SIGTERM"},
        Row{"idle+shorter", kIdle, kShorter, t1 + seconds(5), "stop rpc"},
        Row{"idle+longer", kIdle, kLonger, t0 + seconds(60), "idle"},
        Row{"stoprpc+sigterm0", kStopRpc, kSigterm0, t1, "SIGTERM"},
        Row{"stoprpc+sigterm2", kStopRpc, kSigterm2, t1 + seconds(2),
            "SIGTERM"},
        Row{"stoprpc+shorter", kStopRpc, kShorter, t1 + seconds(5), "stop rpc"},
        Row{"stoprpc+longer", kStopRpc, kLonger, t0 + seconds(30), "stop rpc"}),
    [](const auto& p) {
      std::string name = p.param.name;
      std::erase(name, '+');
      return name;
    });

TEST(StopRequestsTest, NoLimitUntilARequestHasOne) {
  StopRequests requests;
  EXPECT_TRUE(requests.empty());
  EXPECT_EQ(requests.first_arrival(), TimePoint{});
  EXPECT_FALSE(requests.Add({"stop rpc", Duration(-1), t0}));
  EXPECT_EQ(requests.deadline(), TimePoint::max());
  EXPECT_EQ(requests.deadline_source(), "");
  EXPECT_TRUE(requests.Add({"SIGTERM", seconds(3), t1}));
  EXPECT_EQ(requests.deadline(), t1 + seconds(3));
}

// Both sides of the boundary: one tick earlier moves the deadline, the same
// deadline does not (the first request keeps it).
TEST(StopRequestsTest, ATieKeepsTheFirstAndOneTickEarlierWins) {
  StopRequests requests;
  requests.Add({"max lifetime", seconds(10), t0});
  EXPECT_FALSE(requests.Add({"stop rpc", seconds(9), t1}));
  EXPECT_EQ(requests.deadline_source(), "max lifetime");
  EXPECT_TRUE(requests.Add({"SIGTERM", seconds(9) - Duration(1), t1}));
  EXPECT_EQ(requests.deadline_source(), "SIGTERM");
  EXPECT_EQ(requests.deadline(), t0 + seconds(10) - Duration(1));
}

TEST(StopRequestsTest, AFloodOfOneSourceIsOneEntryWithACount) {
  StopRequests requests;
  requests.Add({"max lifetime", seconds(60), t0});
  for (int i = 0; i < 300; ++i) {
    requests.Add({"stop rpc", Duration(-1), t0 + milliseconds(200 + i)});
  }
  requests.Add({"SIGTERM", seconds(0), t0 + seconds(3)});
  EXPECT_EQ(requests.Describe(t0),
            "max lifetime (grace 60 s, at +0.0 s), "
            "stop rpc x300 (no limit, first at +0.2 s), "
            "SIGTERM (grace 0 s, at +3.0 s; set the deadline)");
}

TEST(StopRequestsTest, AHugeGraceSaturatesInsteadOfWrapping) {
  const StopRequest forever{"stop rpc", Duration::max(), t0};
  EXPECT_EQ(forever.Deadline(), TimePoint::max());
}

// The worker's drain, with jobs that end when a test says so.
class WorkerDrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        worker_.RegisterKind("gate", test_support::GateKind(release_)).ok());
  }

  std::shared_ptr<CollectingJob> Dispatch() {
    JobRequest request;
    request.job_id = test_support::UniqueJobId("gate");
    request.kind = "gate";
    auto job = std::make_shared<CollectingJob>(request);
    EXPECT_TRUE(worker_.Dispatch(job).ok());
    return job;
  }

  absl::Notification release_;
  Worker worker_{WorkerOptions{.max_concurrent_tasks = 4}};
};

// Whoever hears of a job's end finds its slot free (a client dispatching
// to a one-slot worker right after is not told the docket is full); the
// counts say how each job ended.
TEST_F(WorkerDrainTest, AJobLeavesTheDocketBeforeItsEndIsToldAndIsCounted) {
  struct Probe final : Job {
    Probe(JobRequest request, const Worker& worker)
        : Job(std::move(request), seconds(5)), worker(worker) {}
    void OnAccepted() override {}
    EmitResult Emit(OutputStream, std::string_view, TimePoint) override {
      return EmitResult::kSent;
    }
    void OnOutcome(const JobOutcome&) override {
      in_flight_at_end = worker.docket().in_flight();
      told.Notify();
    }
    const Worker& worker;
    std::atomic<std::size_t> in_flight_at_end{99};
    absl::Notification told;
  };
  JobRequest request;
  request.job_id = "probe";
  request.kind = "gate";
  auto probe = std::make_shared<Probe>(request, worker_);
  ASSERT_TRUE(worker_.Dispatch(probe).ok());
  release_.Notify();
  probe->told.WaitForNotification();
  EXPECT_EQ(probe->in_flight_at_end, 0u);
  std::shared_ptr<CollectingJob> finished = Dispatch();
  ASSERT_TRUE(
      test_support::WaitFor([&] { return finished->outcome().has_value(); }));
  const JobCounts counts = worker_.counts();
  EXPECT_EQ(counts.started, 2u);
  EXPECT_EQ(counts.succeeded, 2u);
  EXPECT_EQ(counts.failed, 0u);
  EXPECT_EQ(counts.cancelled, 0u);
}

TEST_F(WorkerDrainTest, ALaterShorterRequestCancelsALongDrain) {
  std::shared_ptr<CollectingJob> job = Dispatch();
  worker_.RequestStop({.source = "max lifetime", .grace = hours(6)});
  EXPECT_FALSE(worker_.WaitDrainedUntil(std::chrono::steady_clock::now() +
                                        milliseconds(50)))
      << "a 6 h drain with a job running";
  JobRequest another = job->request();
  another.job_id = test_support::UniqueJobId("gate");
  EXPECT_EQ(worker_.Dispatch(std::make_shared<CollectingJob>(another)).code(),
            absl::StatusCode::kUnavailable)
      << "draining: no new work";
  worker_.RequestStop({.source = "SIGTERM", .grace = Duration::zero()});
  const DrainReport report = worker_.WaitDrained();
  EXPECT_EQ(report.summary.cancelled, 1u);
  EXPECT_EQ(report.summary.drained, 0u);
  EXPECT_EQ(report.deadline_source, "SIGTERM");
  EXPECT_THAT(report.requests, HasSubstr("max lifetime (grace 21600 s"));
  EXPECT_THAT(report.requests, HasSubstr("SIGTERM (grace 0 s"));
  EXPECT_LT(report.took, seconds(30));
  ASSERT_TRUE(job->outcome().has_value());
  EXPECT_EQ(job->outcome()->failure, JobOutcome::Failure::kCancelled);
  EXPECT_EQ(worker_.counts().cancelled, 1u);
  EXPECT_EQ(worker_.counts().started, 1u);
}

TEST_F(WorkerDrainTest, ALaterLongerRequestChangesNothing) {
  std::shared_ptr<CollectingJob> job = Dispatch();
  worker_.RequestStop({.source = "stop rpc", .grace = milliseconds(100)});
  worker_.RequestStop({.source = "SIGTERM", .grace = hours(1)});
  const DrainReport report = worker_.WaitDrained();
  EXPECT_EQ(report.summary.cancelled, 1u);
  EXPECT_EQ(report.deadline_source, "stop rpc");
  EXPECT_GE(report.took, milliseconds(100));
  EXPECT_LT(report.took, seconds(30));
}

TEST_F(WorkerDrainTest, AJobThatFinishesInTimeIsDrained) {
  std::shared_ptr<CollectingJob> job = Dispatch();
  std::promise<StopSummary> from_callback;
  worker_.OnDrained([&](const StopSummary& s) { from_callback.set_value(s); });
  worker_.RequestStop({.source = "idle", .grace = hours(1)});
  release_.Notify();
  const DrainReport report = worker_.WaitDrained();
  EXPECT_EQ(report.summary.drained, 1u);
  EXPECT_EQ(report.summary.cancelled, 0u);
  std::future<StopSummary> called = from_callback.get_future();
  ASSERT_EQ(called.wait_for(seconds(30)), std::future_status::ready);
  EXPECT_EQ(called.get().drained, 1u);
  EXPECT_EQ(job->outcome(), JobOutcome::Exited(0));
  // Registered after the end: answered at once.
  bool late = false;
  worker_.OnDrained([&](const StopSummary&) { late = true; });
  EXPECT_TRUE(late);
}

TEST_F(WorkerDrainTest, StopCallsShareTheDrainAndItsSummary) {
  std::shared_ptr<CollectingJob> job = Dispatch();
  StopSummary a, b;
  std::thread first([&] { a = worker_.Stop(Duration(-1)); });
  std::thread second([&] { b = worker_.Stop(milliseconds(50)); });
  first.join();
  second.join();
  EXPECT_EQ(a.cancelled, 1u);
  EXPECT_EQ(b.cancelled, 1u);
}

TEST(JobEndTest, EveryOutcomeHasItsEndAndEveryEndItsName) {
  using enum JobOutcome::Failure;
  EXPECT_EQ(JobEndOf(JobOutcome::Exited(0)), JobEnd::kSucceeded);
  EXPECT_EQ(JobEndOf(JobOutcome::Exited(3)), JobEnd::kExitedNonZero);
  EXPECT_EQ(JobEndOf(JobOutcome::Signaled(9)), JobEnd::kSignaled);
  EXPECT_EQ(JobEndOf(JobOutcome::Failed(kStartFailed, "")),
            JobEnd::kStartFailed);
  EXPECT_EQ(JobEndOf(JobOutcome::Failed(kTimeLimitExceeded, "")),
            JobEnd::kTimedOut);
  EXPECT_EQ(JobEndOf(JobOutcome::Failed(kHandlerError, "")),
            JobEnd::kHandlerError);
  EXPECT_EQ(JobEndOf(JobOutcome::Failed(kCancelled, "")), JobEnd::kCancelled);
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < kJobEndCount; ++i) {
    names.insert(JobEndName(static_cast<JobEnd>(i)));
  }
  EXPECT_EQ(names.size(), kJobEndCount) << "one name each";
}

// The end listener hears each job once, with its times on the worker's
// clock: from acceptance to Running(), and to the end.
TEST(JobEndTest, TheListenerHearsEachEndWithItsTimes) {
  FakeClock clock;
  Worker worker(WorkerOptions{.max_concurrent_tasks = 2}, clock);
  std::vector<Worker::JobTiming> heard;
  absl::Mutex mu;
  worker.OnJobEnd([&](const Worker::JobTiming& timing) {
    absl::MutexLock lock(&mu);
    heard.push_back(timing);
  });
  ASSERT_TRUE(worker
                  .RegisterKind("timed", {.run =
                                              [&clock](JobContext& ctx) {
                                                clock.Advance(milliseconds(20));
                                                ctx.Running();
                                                clock.Advance(seconds(3));
                                                return JobOutcome::Exited(1);
                                              }})
                  .ok());
  JobRequest request;
  request.job_id = "timed-1";
  request.kind = "timed";
  auto job = std::make_shared<CollectingJob>(request);
  ASSERT_TRUE(worker.Dispatch(job).ok());
  ASSERT_TRUE(
      test_support::WaitFor([&] { return job->outcome().has_value(); }));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].end, JobEnd::kExitedNonZero);
  EXPECT_EQ(heard[0].start, milliseconds(20));
  EXPECT_EQ(heard[0].total, milliseconds(3020));
  EXPECT_EQ(
      worker.counts().ended[static_cast<std::size_t>(JobEnd::kExitedNonZero)],
      1u);
  EXPECT_EQ(worker.counts().failed, 1u);
}

}  // namespace
}  // namespace cfdb::worker

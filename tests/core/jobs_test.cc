// Jobs as handles (worker.h): ids as identities, retained results, the
// detach grace, cancelling one job, and the conditional stop.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/worker.h"
#include "core/job_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log_capture.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

class NullReader final : public JobReader {
 public:
  void Wake() override {}
};

// JobsTest has a worker on a fake clock with two kinds: "gate" runs until
// released or cancelled; "echo" writes its payload and exits 0.
class JobsTest : public ::testing::Test {
 protected:
  JobsTest() {
    EXPECT_TRUE(
        worker_.RegisterKind("gate", test_support::GateKind(release_)).ok());
    EXPECT_TRUE(worker_.RegisterKind("echo", test_support::EchoKind()).ok());
  }

  static JobRequest Request(std::string id, std::string kind,
                            Duration detach_grace = Duration::zero()) {
    JobRequest request;
    request.job_id = std::move(id);
    request.kind = std::move(kind);
    request.payload = "hello";
    request.detach_grace = detach_grace;
    return request;
  }

  // Start dispatches a job with a reader attached, as a transport does.
  std::shared_ptr<Job> Start(JobRequest request,
                             const std::shared_ptr<JobReader>& reader) {
    auto job = std::make_shared<Job>(std::move(request), seconds(5));
    job->journal().Attach(reader, {}, JobJournal::Role::kControl);
    EXPECT_TRUE(worker_.Dispatch(job).ok());
    return job;
  }

  static bool Ended(const std::shared_ptr<Job>& job) {
    return test_support::WaitFor([&] { return job->outcome().has_value(); });
  }

  FakeClock clock_;
  absl::Notification release_;
  Worker worker_{
      WorkerOptions{.max_concurrent_tasks = 4, .result_ttl = seconds(60)},
      clock_};
  const std::shared_ptr<NullReader> reader_ = std::make_shared<NullReader>();
};

TEST_F(JobsTest, TwentyConcurrentDispatchesOfOneIdStartExactlyOneJob) {
  std::atomic<int> started{0}, exists{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&] {
      auto job = std::make_shared<Job>(Request("same", "gate"), seconds(5));
      const absl::Status s = worker_.Dispatch(job);
      if (s.ok()) ++started;
      if (absl::IsAlreadyExists(s)) ++exists;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(started, 1);
  EXPECT_EQ(exists, 19);
  EXPECT_EQ(worker_.docket().in_flight(), 1u);
  release_.Notify();
}

TEST_F(JobsTest, AResultIsRetainedForItsTtlThenForgotten) {
  std::shared_ptr<Job> job = Start(Request("r", "echo"), reader_);
  ASSERT_TRUE(Ended(job));
  auto again = std::make_shared<Job>(Request("r", "echo"), seconds(5));
  EXPECT_TRUE(absl::IsAlreadyExists(worker_.Dispatch(again)));

  clock_.Advance(seconds(60) - milliseconds(1));
  auto attached = worker_.Attach("r", {}, std::make_shared<NullReader>(), {},
                                 JobJournal::Role::kControl);
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_TRUE(attached->second.ended);
  EXPECT_EQ(attached->first, job);

  clock_.Advance(milliseconds(1));
  EXPECT_TRUE(
      absl::IsNotFound(worker_
                           .Attach("r", {}, std::make_shared<NullReader>(), {},
                                   JobJournal::Role::kControl)
                           .status()));
  EXPECT_TRUE(worker_.Dispatch(again).ok());  // the id is free again
}

TEST_F(JobsTest, JobsListsWhatRunsAndWhatIsRetainedOldestFirst) {
  std::shared_ptr<Job> done = Start(Request("first", "echo"), reader_);
  ASSERT_TRUE(Ended(done));
  clock_.Advance(seconds(1));
  Start(Request("second", "gate"), std::make_shared<NullReader>());
  const std::vector<std::shared_ptr<Job>> jobs = worker_.Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0]->request().job_id, "first");
  EXPECT_TRUE(jobs[0]->outcome().has_value());
  EXPECT_EQ(jobs[1]->request().job_id, "second");
  EXPECT_FALSE(jobs[1]->outcome().has_value());
  release_.Notify();
}

TEST_F(JobsTest, AJobWhoseReaderLeavesWithNoDetachGraceIsCancelled) {
  std::shared_ptr<Job> job = Start(Request("j", "gate"), reader_);
  job->ReaderLeft(reader_.get());
  ASSERT_TRUE(Ended(job));
  EXPECT_EQ(job->outcome()->failure, JobOutcome::Failure::kCancelled);
}

TEST_F(JobsTest, AJobWithANegativeDetachGraceRunsOnUnattached) {
  std::shared_ptr<Job> job = Start(Request("j", "gate", Duration(-1)), reader_);
  job->ReaderLeft(reader_.get());
  EXPECT_FALSE(job->cancelled());
  release_.Notify();
  ASSERT_TRUE(Ended(job));
  EXPECT_EQ(*job->outcome(), JobOutcome::Exited(0));
}

TEST_F(JobsTest, AJobLeftPastItsDetachGraceIsCancelled) {
  std::shared_ptr<Job> job =
      Start(Request("j", "gate", milliseconds(50)), reader_);
  job->ReaderLeft(reader_.get());
  ASSERT_TRUE(Ended(job));
  EXPECT_EQ(job->outcome()->failure, JobOutcome::Failure::kCancelled);
}

TEST_F(JobsTest, AReaderThatAttachesWithinTheDetachGraceKeepsTheJob) {
  std::shared_ptr<Job> job =
      Start(Request("j", "gate", milliseconds(500)), reader_);
  job->ReaderLeft(reader_.get());
  // The attach must come within the grace on the real clock: 500 ms holds
  // even on a loaded machine.
  ASSERT_TRUE(worker_
                  .Attach("j", {}, std::make_shared<NullReader>(), {},
                          JobJournal::Role::kControl)
                  .ok());
  // Three detach graces later it still runs.
  EXPECT_FALSE(test_support::WaitFor([&] { return job->cancelled(); },
                                     milliseconds(1500)));
  release_.Notify();
  ASSERT_TRUE(Ended(job));
  EXPECT_EQ(*job->outcome(), JobOutcome::Exited(0));
}

TEST_F(JobsTest, CancelJobCancelsThatJobAloneWithItsGrace) {
  std::shared_ptr<Job> a = Start(Request("a", "gate"), reader_);
  std::shared_ptr<Job> b = Start(Request("b", "gate"), reader_);
  auto cancelled = worker_.CancelJob("a", {}, milliseconds(250));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(*cancelled, a);
  EXPECT_EQ(a->kill_grace(), milliseconds(250));
  ASSERT_TRUE(Ended(a));
  EXPECT_EQ(a->outcome()->failure, JobOutcome::Failure::kCancelled);
  EXPECT_FALSE(b->cancelled());
  release_.Notify();
  ASSERT_TRUE(Ended(b));
  EXPECT_TRUE(
      absl::IsNotFound(worker_.CancelJob("nobody", {}, seconds(0)).status()));
}

TEST_F(JobsTest, WhenEndedTellsOnceTheJobEndsOrAtOnceAfter) {
  std::shared_ptr<Job> job = Start(Request("j", "gate"), reader_);
  std::atomic<int> told{0};
  job->WhenEnded([&](const JobOutcome&) { ++told; });
  EXPECT_EQ(told, 0);
  release_.Notify();
  ASSERT_TRUE(test_support::WaitFor([&] { return told == 1; }));
  job->WhenEnded([&](const JobOutcome&) { ++told; });
  EXPECT_EQ(told, 2);
}

TEST_F(JobsTest, AConditionalStopNeedsTheIdleTimeAskedFor) {
  clock_.Advance(seconds(5));
  const absl::Status early =
      worker_.RequestStopIfIdle({.source = "test"}, seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(early)) << early;
  EXPECT_THAT(std::string(early.message()), HasSubstr("idle 5.000 s"));
  EXPECT_FALSE(worker_.stopping());
  clock_.Advance(seconds(5));
  EXPECT_TRUE(worker_.RequestStopIfIdle({.source = "test"}, seconds(10)).ok());
  EXPECT_TRUE(worker_.stopping());
}

TEST_F(JobsTest, AConditionalStopIsRefusedWhileAJobRuns) {
  Start(Request("j", "gate"), reader_);
  const absl::Status busy =
      worker_.RequestStopIfIdle({.source = "test"}, Duration::zero());
  EXPECT_TRUE(absl::IsFailedPrecondition(busy)) << busy;
  EXPECT_THAT(std::string(busy.message()), HasSubstr("in flight"));
  EXPECT_FALSE(worker_.stopping());
  release_.Notify();
}

TEST_F(JobsTest, AConditionalStopWaitsUntilADetachedJobsResultIsRead) {
  std::shared_ptr<Job> job = Start(Request("d", "echo", Duration(-1)), reader_);
  job->ReaderLeft(reader_.get());
  ASSERT_TRUE(Ended(job));
  const absl::Status unread =
      worker_.RequestStopIfIdle({.source = "test"}, Duration::zero());
  EXPECT_TRUE(absl::IsFailedPrecondition(unread)) << unread;
  EXPECT_THAT(std::string(unread.message()), HasSubstr("'d'"));

  // A client reads it: the chunk, then the outcome, delivered.
  auto reader = std::make_shared<NullReader>();
  ASSERT_TRUE(
      worker_.Attach("d", {}, reader, {}, JobJournal::Role::kControl).ok());
  JobJournal::Chunk chunk;
  JobOutcome outcome;
  ASSERT_EQ(job->journal().Next(reader.get(), chunk, outcome),
            JobJournal::Read::kChunk);
  EXPECT_EQ(chunk.data(), "hello");
  ASSERT_EQ(job->journal().Next(reader.get(), chunk, outcome),
            JobJournal::Read::kOutcome);
  job->journal().Claimed();
  EXPECT_TRUE(
      worker_.RequestStopIfIdle({.source = "test"}, Duration::zero()).ok());
}

TEST_F(JobsTest, AnUnreadResultOfAnAttachedJobDoesNotHoldAStop) {
  // Its caller chose detach grace 0: nobody will come back for it.
  std::shared_ptr<Job> job = Start(Request("a", "echo"), reader_);
  ASSERT_TRUE(Ended(job));
  EXPECT_TRUE(
      worker_.RequestStopIfIdle({.source = "test"}, Duration::zero()).ok());
}

// No job is ever accepted by a worker whose conditional stop succeeded, and
// a conditional stop never succeeds while a job is in flight.
TEST(ConditionalStopRaceTest, ADispatchAndAConditionalStopNeverBothWin) {
  for (int round = 0; round < 200; ++round) {
    absl::Notification release;
    Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
    ASSERT_TRUE(
        worker.RegisterKind("gate", test_support::GateKind(release)).ok());
    JobRequest request;
    request.job_id = "race";
    request.kind = "gate";
    auto job = std::make_shared<Job>(request, seconds(5));
    absl::Status dispatched, stopped;
    std::thread dispatch([&] { dispatched = worker.Dispatch(job); });
    stopped = worker.RequestStopIfIdle({.source = "race"}, Duration::zero());
    dispatch.join();
    EXPECT_NE(dispatched.ok(), stopped.ok())
        << "round " << round << ": dispatch " << dispatched << ", stop "
        << stopped;
    release.Notify();
  }
}

// The registry's cap on results (issue 35): read results go first, then
// the identity holding the most gives one up; an unread one evicted is
// logged and counted.
class RetainedResultsTest : public ::testing::Test {
 protected:
  // Ended adds an ended result of `client`, detached (so unread until
  // read), and returns it.
  std::shared_ptr<Job> Ended(const std::string& id, const std::string& client,
                             bool read = false) {
    JobRequest request{.job_id = id, .kind = "exec"};
    request.client = client;
    request.detach_grace = seconds(-1);
    auto job = std::make_shared<Job>(std::move(request), seconds(1));
    EXPECT_TRUE(registry_.Add(job, [] { return absl::OkStatus(); }).ok());
    if (read) {
      job->journal().End(JobOutcome::Exited(0));
      job->journal().Claimed();
    }
    registry_.Ended(job);
    return job;
  }

  FakeClock clock_;
  JobRegistry registry_{clock_, std::chrono::minutes(5), 1 << 20};
};

TEST_F(RetainedResultsTest, OneIdentityCannotPushAnothersUnreadResultOut) {
  test_support::LogCapture log(spdlog::level::warn);
  Ended("a-result", "identity-a");
  Ended("read-result", "identity-b", /*read=*/true);
  for (std::size_t i = 0; i < kMaxRetainedResults; ++i) {
    Ended(absl::StrCat("b-", i), "identity-b");
  }
  // The first over the cap took the read result; the rest, b's own.
  EXPECT_EQ(registry_.Find("read-result"), nullptr);
  EXPECT_NE(registry_.Find("a-result"), nullptr) << "a's unread result kept";
  EXPECT_EQ(registry_.Find("b-0"), nullptr);
  EXPECT_NE(registry_.Find("b-1"), nullptr);
  EXPECT_EQ(registry_.All().size(), kMaxRetainedResults);
  EXPECT_EQ(registry_.UnreadEvicted(), 1u);
  EXPECT_THAT(log.str(), HasSubstr("job b-0: its unread result was evicted"));
  EXPECT_THAT(log.str(), HasSubstr("identity-b holds the most"));
}

}  // namespace
}  // namespace cfdb::worker

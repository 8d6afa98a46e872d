#include "daemon/retirement.h"

#include <deque>
#include <set>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

// FakeIdleSource answers polls from a script; the last answer repeats.
struct FakeIdleSource {
  explicit FakeIdleSource(const Clock& clock) : clock(clock) {}
  const Clock& clock;
  std::deque<absl::StatusOr<double>> script;
  std::vector<TimePoint> polls;
  std::vector<Duration> timeouts;
  // Answers of fresh dials, if set (else as `script`); the last repeats.
  std::deque<absl::StatusOr<double>> fresh_script;
  int fresh_polls = 0;
  absl::Status close_status;
  int closes = 0;
};

// Next returns the script's next answer; the last one repeats.
absl::StatusOr<double> Next(std::deque<absl::StatusOr<double>>& script) {
  // Value or status, not the StatusOr copied whole (GCC 12 then warns of
  // the value of an error "maybe uninitialized").
  const absl::StatusOr<double>& front = script.front();
  absl::StatusOr<double> answer =
      front.ok() ? absl::StatusOr<double>(*front) : front.status();
  if (script.size() > 1) script.pop_front();
  return answer;
}

class SourceProxy : public IdleSource {
 public:
  explicit SourceProxy(FakeIdleSource& fake) : fake_(fake) {}
  absl::StatusOr<double> IdleTime(Duration timeout) override {
    fake_.polls.push_back(fake_.clock.Now());
    fake_.timeouts.push_back(timeout);
    return Next(fake_.script);
  }
  absl::StatusOr<double> FreshIdleTime(Duration timeout) override {
    if (fake_.fresh_script.empty()) return IdleTime(timeout);
    fake_.polls.push_back(fake_.clock.Now());
    ++fake_.fresh_polls;
    return Next(fake_.fresh_script);
  }
  absl::Status Close() override {
    ++fake_.closes;
    return fake_.close_status;
  }

 private:
  FakeIdleSource& fake_;
};

class RetirementTest : public ::testing::Test {
 protected:
  RetirementTest() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
    options_.idle_timeout = seconds(600);
    options_.idle_poll_interval = seconds(15);
    options_.idle_poll_deadline = seconds(5);
    options_.idle_poll_failure_limit = 20;
    options_.max_lifetime = hours(12);
    options_.max_lifetime_jitter = Duration::zero();
    options_.max_lifetime_grace = hours(6);
    options_.signal_grace = Duration::zero();
  }

  // Script sets the answers of the polls, in order.
  void Script(std::initializer_list<absl::StatusOr<double>> answers) {
    source_.script.assign(answers.begin(), answers.end());
  }

  Retirement Run() {
    start_ = clock_.Now();
    RetirementPolicy reaper(
        options_, clock_, shutdown_.watcher(),
        [this]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
          ++connects_;
          return std::make_unique<SourceProxy>(source_);
        },
        [this](StopRequest r) { stops_.push_back(r.grace); });
    return reaper.Run();
  }

  int CountLines(std::string_view level) const {
    std::istringstream in(log_.str());
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      n += line.rfind(std::string(level) + " ", 0) == 0;
    }
    return n;
  }

  FakeClock clock_;
  Shutdown shutdown_;
  RetirementOptions options_;
  FakeIdleSource source_{clock_};
  std::ostringstream log_;
  TimePoint start_;
  int connects_ = 0;
  std::vector<Duration> stops_;
};

TEST(RetirementDefaultsTest, MatchTheDocumentedDefaults) {
  const RetirementOptions defaults;
  EXPECT_EQ(defaults.idle_timeout, seconds(600));
  EXPECT_EQ(defaults.idle_poll_interval, seconds(15));
  EXPECT_EQ(defaults.idle_poll_deadline, seconds(5));
  EXPECT_EQ(defaults.idle_poll_failure_limit, 20);
  EXPECT_EQ(defaults.max_lifetime, hours(12));
  EXPECT_EQ(defaults.max_lifetime_grace, hours(6));
  EXPECT_EQ(defaults.max_lifetime_jitter, seconds(4320)) << "a tenth";
  EXPECT_EQ(defaults.signal_grace, Duration::zero());
}

// The jitter is drawn once, from [0, J], and the worker retires at the max
// lifetime less what was drawn, with the draw logged.
TEST_F(RetirementTest, JitterIsDrawnOnceAndShortensTheLifetime) {
  options_.max_lifetime = seconds(600);
  options_.max_lifetime_jitter = seconds(60);
  std::vector<Duration> bounds;
  options_.draw_jitter = [&](Duration max) {
    bounds.push_back(max);
    return seconds(42);
  };
  Script({0.0});  // busy: only the lifetime ends it
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(clock_.Now() - start_, seconds(558));
  EXPECT_EQ(bounds, std::vector<Duration>{seconds(60)})
      << "drawn once, from [0, J], over " << source_.polls.size() << " polls";
  EXPECT_THAT(log_.str(), HasSubstr("max lifetime: 600.000 s less a jitter "
                                    "of 42.000 s (drawn from 0..60.000 s)"));
  EXPECT_THAT(log_.str(), HasSubstr("max lifetime 558.000 s reached"));
}

// The real draw stays within [L - J, L] and spreads: a fleet started
// together does not retire together.
TEST_F(RetirementTest, RealDrawsStayInBoundsAndSpread) {
  options_.idle_timeout = Duration::zero();
  options_.max_lifetime = seconds(1000);
  options_.max_lifetime_jitter = seconds(100);
  std::set<Duration> lifetimes;
  for (int i = 0; i < 50; ++i) {
    const TimePoint start = clock_.Now();
    EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
    const Duration lifetime = clock_.Now() - start;
    EXPECT_GE(lifetime, seconds(900));
    EXPECT_LE(lifetime, seconds(1000));
    lifetimes.insert(lifetime);
  }
  EXPECT_GT(lifetimes.size(), 40u) << "50 workers, (nearly) 50 lifetimes";
}

// Zero disables the jitter (nothing is drawn); one beyond the lifetime is
// bounded by it; a draw out of range is clamped.
TEST_F(RetirementTest, ZeroJitterIsExactlyTheMaxLifetime) {
  options_.max_lifetime = seconds(120);
  int draws = 0;
  options_.draw_jitter = [&](Duration) {
    ++draws;
    return seconds(10);
  };
  Script({0.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(clock_.Now() - start_, seconds(120));
  EXPECT_EQ(draws, 0);
  EXPECT_THAT(log_.str(), Not(HasSubstr("jitter")));
}

// A jitter over half the lifetime (a template default left as it was when
// the lifetime was lowered) is capped at half, with a warning, never a
// worker that retires at once or refuses to start.
TEST_F(RetirementTest, JitterIsCappedAtHalfTheLifetime) {
  options_.max_lifetime = seconds(120);
  options_.max_lifetime_jitter = hours(1);
  Duration bound{};
  options_.draw_jitter = [&](Duration max) {
    bound = max;
    return hours(2);  // out of range: clamped too
  };
  Script({0.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(bound, seconds(60));
  EXPECT_EQ(clock_.Now() - start_, seconds(60));
  EXPECT_THAT(log_.str(), HasSubstr("capped at 60.000 s"));
  EXPECT_EQ(CountLines("warning"), 1);
}

TEST_F(RetirementTest, ExitsOnTheFirstPollOverTheThresholdWithTheDrainGrace) {
  Script({601.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(exit.idle_seconds, 601.0);
  ASSERT_EQ(source_.polls.size(), 1u);
  EXPECT_EQ(source_.timeouts[0], seconds(5)) << "each poll has a deadline";
  EXPECT_EQ(stops_, std::vector<Duration>{hours(6)});
  EXPECT_THAT(log_.str(), HasSubstr("exiting: idle for 601.000 s"));
}

TEST_F(RetirementTest,
       OneTickBeforeTheThresholdKeepsServingAndTheThresholdExits) {
  const double just_under = 600.0 - 1e-6;
  Script({just_under, 600.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(source_.polls.size(), 2u);
}

TEST_F(RetirementTest,
       IdleTimeoutBelowTheCadenceExitsAtTheTimeoutNotAtTheCadence) {
  options_.idle_timeout = seconds(2);
  Script({2.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  ASSERT_EQ(source_.polls.size(), 1u);
  EXPECT_EQ(source_.polls[0] - start_, seconds(2)) << "not at the 15 s tick";
}

TEST_F(RetirementTest, BusyWorkerIsNeverReapedAndExitsViaMaxLifetime) {
  options_.max_lifetime = seconds(120);
  Script({0.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(clock_.Now() - start_, seconds(120));
  EXPECT_EQ(source_.polls.size(), 7u) << "polled at 15, 30, ..., 105 s";
  EXPECT_EQ(stops_, std::vector<Duration>{hours(6)});
}

TEST_F(RetirementTest, PartialIdleKeepsServingUntilMaxLifetime) {
  options_.max_lifetime = seconds(60);
  Script({10.0, 200.0, 30.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  EXPECT_GE(source_.polls.size(), 3u);
}

TEST_F(RetirementTest, ZeroIdleTimeoutNeverConnects) {
  options_.idle_timeout = Duration::zero();
  options_.max_lifetime = seconds(30);
  Script({10000.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(connects_, 0);
  EXPECT_TRUE(source_.polls.empty());
}

TEST_F(RetirementTest, IdleUnavailablePollsOnceAndFallsBackToMaxLifetime) {
  options_.max_lifetime = seconds(300);
  Script({absl::UnimplementedError("no Idle")});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  EXPECT_EQ(source_.polls.size(), 1u);
  EXPECT_EQ(CountLines("warning"), 1);
  EXPECT_EQ(CountLines("error"), 0) << "a missing capability is not a fault";
  EXPECT_THAT(log_.str(), HasSubstr("idle unavailable (UNIMPLEMENTED"));
  EXPECT_THAT(log_.str(), HasSubstr("max lifetime backstop in 285 s"));
}

TEST_F(RetirementTest, TransientFailureThenIdleExitsViaIdle) {
  Script({absl::UnavailableError("down"), 700.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(source_.polls.size(), 2u);
  EXPECT_THAT(log_.str(), HasSubstr("transient error (UNAVAILABLE: down)"));
}

TEST_F(RetirementTest, SuccessResetsTheConsecutiveFailureCount) {
  options_.idle_poll_failure_limit = 2;
  Script(
      {absl::InternalError("boom"), 1.0, absl::InternalError("boom"), 700.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(source_.polls.size(), 4u);
  EXPECT_EQ(CountLines("error"), 0);
  EXPECT_EQ(CountLines("warning"), 2);
}

// Past the failure limit: one ERROR, then polls every kSlowPollFactor
// intervals, not never again.
TEST_F(RetirementTest, SustainedFailureLogsOneErrorAndPollsSlowly) {
  options_.idle_poll_failure_limit = 2;
  options_.max_lifetime = hours(1);
  Script({absl::InternalError("boom")});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
  ASSERT_GE(source_.polls.size(), 4u);
  EXPECT_EQ(source_.polls[1] - source_.polls[0], seconds(15));
  EXPECT_EQ(source_.polls[3] - source_.polls[2], seconds(15) * kSlowPollFactor)
      << "slow after the limit";
  // Polls at 15 s and 30 s, then every 60 s from 90 s to 3570 s.
  EXPECT_EQ(source_.polls.size(), 2u + 60u);
  EXPECT_EQ(CountLines("error"), 1);
  EXPECT_THAT(log_.str(), HasSubstr("rpc error (INTERNAL: boom)"));
  EXPECT_THAT(log_.str(), HasSubstr("max lifetime backstop in"));
}

// Retirement resumes once the self-poll recovers.
TEST_F(RetirementTest, AfterTheFailureLimitARecoveredPollStillRetires) {
  options_.idle_poll_failure_limit = 2;
  Script({absl::InternalError("boom"), absl::InternalError("boom"),
          absl::InternalError("boom"), 700.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_THAT(log_.str(), HasSubstr("answered again after 3 failures"));
}

// Fresh dials that are not answered while the pooled connection is: the
// listener is gone, and the worker retires saying so.
TEST_F(RetirementTest, FreshDialsThatFailMeanTheListenerIsLost) {
  source_.fresh_script = {absl::UnavailableError("failed to connect")};
  Script({5.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kListenerLost);
  EXPECT_EQ(source_.fresh_polls, kListenerLostAfter);
  EXPECT_EQ(source_.polls.size(),
            static_cast<size_t>(kFreshDialEvery * kListenerLostAfter));
  ASSERT_EQ(stops_.size(), 1u);
  EXPECT_EQ(stops_[0], hours(6)) << "jobs in flight still drain";
  EXPECT_THAT(log_.str(), HasSubstr("listener lost"));
  EXPECT_EQ(CountLines("error"), 1);
}

// One fresh dial that works clears the count.
TEST_F(RetirementTest, AFreshDialThatWorksClearsTheCount) {
  options_.max_lifetime = seconds(15 * kFreshDialEvery * 6);
  source_.fresh_script = {
      absl::UnavailableError("x"), absl::UnavailableError("x"), 5.0,
      absl::UnavailableError("x"), absl::UnavailableError("x"), 5.0};
  Script({5.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
}

TEST_F(RetirementTest, ErrorWithMaxLifetimeDisabledPromisesNoBackstop) {
  options_.idle_poll_failure_limit = 1;
  options_.max_lifetime = Duration::zero();
  Script({absl::DeadlineExceededError("slow")});
  // Nothing else can end this loop: a signal "arrives" at the wait after
  // the failed poll.
  clock_.SetWaitHook([this](TimePoint) {
    if (clock_.waits() >= 2) shutdown_.Stop(StopCause::kSignal);
  });
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kSignal);
  EXPECT_EQ(CountLines("error"), 1);
  EXPECT_THAT(log_.str(), HasSubstr("no backstop: max lifetime is disabled"));
  EXPECT_THAT(log_.str(), Not(HasSubstr("backstop in")));
}

TEST_F(RetirementTest, SignalBeatsAnIdleExit) {
  Script({10000.0});
  shutdown_.Stop(StopCause::kSignal);
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kSignal);
  EXPECT_TRUE(source_.polls.empty());
  EXPECT_EQ(exit.grace, Duration::zero()) << "signals use signal_grace";
  EXPECT_TRUE(stops_.empty()) << "the signal handler made the request";
}

TEST_F(RetirementTest, SignalGraceIsTheOneConfigured) {
  options_.signal_grace = seconds(42);
  shutdown_.Stop(StopCause::kSignal);
  Script({0.0});
  EXPECT_EQ(Run().grace, seconds(42));
  EXPECT_TRUE(stops_.empty());
}

TEST_F(RetirementTest, StopRpcExitLeavesTheDrainToTheRpc) {
  Script({0.0});
  clock_.SetWaitHook(
      [this](TimePoint) { shutdown_.Stop(StopCause::kStopRpc); });
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kStopRpc);
  EXPECT_TRUE(stops_.empty());
}

TEST_F(RetirementTest, MaxLifetimeIsCheckedBeforeSignals) {
  options_.max_lifetime = seconds(15);
  Script({0.0});
  clock_.SetWaitHook([this](TimePoint) { shutdown_.Stop(StopCause::kSignal); });
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kMaxLifetime);
}

TEST_F(RetirementTest, ClosesTheConnectionOnExit) {
  Script({601.0});
  Run();
  EXPECT_EQ(source_.closes, 1);
}

TEST_F(RetirementTest, FailingCloseStillStopsTheWorker) {
  Script({601.0});
  source_.close_status = absl::InternalError("close failed");
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(source_.closes, 1);
  EXPECT_EQ(stops_.size(), 1u);
  EXPECT_THAT(log_.str(), HasSubstr("close failed"));
}

TEST_F(RetirementTest, NextPollComesAtTheThresholdWhenBeforeTheCadence) {
  Script({590.0, 600.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  ASSERT_EQ(source_.polls.size(), 2u);
  EXPECT_EQ(source_.polls[0] - start_, seconds(15));
  EXPECT_EQ(source_.polls[1] - source_.polls[0], seconds(10))
      << "10 s left to the threshold, not the 15 s cadence";
}

TEST_F(RetirementTest, FailedConnectDisablesPollingButNotTheBackstop) {
  options_.max_lifetime = seconds(30);
  RetirementPolicy reaper(
      options_, clock_, shutdown_.watcher(),
      []() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
        return absl::InvalidArgumentError("no address");
      },
      [this](StopRequest r) { stops_.push_back(r.grace); });
  EXPECT_EQ(reaper.Run().reason, ExitReason::kMaxLifetime);
  EXPECT_THAT(log_.str(), HasSubstr("no address"));
}

TEST(RetirementRealClockTest, SignalDuringALongWaitIsSeenAtOnce) {
  RetirementOptions options;
  options.idle_poll_interval = hours(1);
  Shutdown shutdown;
  int polls = 0;
  struct Busy : IdleSource {
    explicit Busy(int& polls) : polls(polls) {}
    absl::StatusOr<double> IdleTime(Duration) override {
      ++polls;
      return 0.0;
    }
    absl::Status Close() override { return absl::OkStatus(); }
    int& polls;
  };
  RetirementPolicy reaper(
      options, SteadyClock::Get(), shutdown.watcher(),
      [&]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
        return std::make_unique<Busy>(polls);
      },
      [](StopRequest) {});
  const TimePoint start = std::chrono::steady_clock::now();
  std::thread signaller([&] { shutdown.Stop(StopCause::kSignal); });
  const Retirement exit = reaper.Run();
  signaller.join();
  EXPECT_EQ(exit.reason, ExitReason::kSignal);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1))
      << "returned long before the one-hour wait ended";
}

}  // namespace
}  // namespace cfdb::worker

#include "serve/retirement.h"

#include <deque>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "support/log_capture.h"

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

  // Hooks are the fakes: the idle source, the listener's dials (answered
  // from dial_script; the last answer repeats), the descriptor check and
  // the stopper, which records the request as the worker's stop state.
  RetirementPolicy::Hooks Hooks() {
    return {.connect = [this]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
              ++connects_;
              return std::make_unique<SourceProxy>(source_);
            },
            .dial_fresh =
                [this](Duration deadline) {
                  dials_.push_back(clock_.Now());
                  dial_deadlines_.push_back(deadline);
                  const absl::Status answer = dial_script_.front();
                  if (dial_script_.size() > 1) dial_script_.pop_front();
                  return answer;
                },
            .can_open_descriptor = [this] { return descriptors_; },
            .stop =
                [this](StopRequest r) {
                  stops_.push_back(r.grace);
                  requests_.push_back(r);
                },
            .stop_state = [this]() -> std::optional<StopState> {
              if (requests_.empty()) return std::nullopt;
              StopRequests requests;
              for (StopRequest r : requests_) {
                r.arrival = clock_.Now();
                requests.Add(r);
              }
              return StopState{.idle_at_request = idle_at_request_,
                               .sources = requests.sources()};
            }};
  }

  Retirement Run() {
    start_ = clock_.Now();
    RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), Hooks());
    const Retirement exit = reaper.Run();
    reading_ = reaper.reading();
    return exit;
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
  test_support::LogCapture log_{spdlog::level::debug};
  TimePoint start_;
  // What the policy's reading said once Run returned.
  RetirementPolicy::Reading reading_;
  int connects_ = 0;
  std::vector<Duration> stops_;
  std::vector<StopRequest> requests_;  // the stop state's requests
  Duration idle_at_request_ = Duration::zero();
  std::deque<absl::Status> dial_script_{absl::OkStatus()};
  std::vector<TimePoint> dials_;
  std::vector<Duration> dial_deadlines_;
  bool descriptors_ = true;
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
  EXPECT_EQ(defaults.listener_check_interval, seconds(10));
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
  EXPECT_THAT(log_.str(), Not(HasSubstr("less a jitter")));
  EXPECT_THAT(log_.str(), HasSubstr("max_lifetime_jitter_seconds=0"));
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
  idle_at_request_ = seconds(601);
  Script({601.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(exit.idle_seconds, 601.0);
  ASSERT_EQ(source_.polls.size(), 1u);
  EXPECT_EQ(source_.timeouts[0], seconds(5)) << "each poll has a deadline";
  EXPECT_EQ(stops_, std::vector<Duration>{hours(6)});
  EXPECT_THAT(log_.str(), HasSubstr("exiting: idle for 601.000 s"));
}

// The poll read the idle time a moment ago: a job accepted since then keeps
// the worker serving (the worker refuses the conditional stop), and the
// next poll over the threshold retires it, with one request.
TEST_F(RetirementTest, AJobAcceptedAfterThePollKeepsTheWorkerServing) {
  Script({601.0, 601.0});
  std::vector<Duration> conditional;
  RetirementPolicy::Hooks hooks = Hooks();
  hooks.stop_if_idle = [&](StopRequest request, Duration idle_for) {
    conditional.push_back(idle_for);
    if (conditional.size() == 1) {
      return absl::FailedPreconditionError("busy: 1 job(s) in flight");
    }
    requests_.push_back(request);
    return absl::OkStatus();
  };
  start_ = clock_.Now();
  RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), hooks);
  const Retirement exit = reaper.Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(source_.polls.size(), 2u);
  EXPECT_EQ(conditional, std::vector<Duration>(2, seconds(600)));
  EXPECT_TRUE(stops_.empty()) << "the conditional stop made the request";
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].grace, hours(6));
  EXPECT_THAT(log_.str(), HasSubstr("idle retirement: kept serving: busy"));
}

// Unread results can keep a worker up for the whole result TTL: the "kept
// serving" line goes through the log throttle, not one a poll (issue 35:
// 290 lines in 290 s).
TEST_F(RetirementTest, KeptServingIsLoggedThroughTheThrottle) {
  constexpr int kRefusals = 30;
  source_.script.assign(kRefusals + 1, 601.0);
  options_.idle_poll_interval = seconds(1);
  int refused = 0;
  RetirementPolicy::Hooks hooks = Hooks();
  hooks.stop_if_idle = [&](StopRequest request, Duration) {
    if (++refused <= kRefusals) {
      return absl::FailedPreconditionError(
          "1 detached job(s) ended with a result no client has read yet");
    }
    requests_.push_back(request);
    return absl::OkStatus();
  };
  start_ = clock_.Now();
  RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), hooks);
  EXPECT_EQ(reaper.Run().reason, ExitReason::kIdle);
  const std::string text = log_.str();
  int lines = 0;
  for (std::size_t at = 0;
       (at = text.find("idle retirement: kept serving", at)) != text.npos;
       ++at) {
    ++lines;
  }
  EXPECT_GE(lines, 1);
  EXPECT_LE(lines, kRefusals / 10 + 1) << "one line per 10 s, with a count";
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
  EXPECT_EQ(reading_.polls_failed, 3u);
  EXPECT_GE(reading_.polls_answered, 1u);
  EXPECT_FALSE(reading_.listener_lost);
}

// New connections that are not answered: the listener is gone, and the
// worker retires saying so, whatever the idle polls say.
TEST_F(RetirementTest, UnansweredDialsMeanTheListenerIsLost) {
  dial_script_ = {absl::DeadlineExceededError("Deadline Exceeded")};
  Script({5.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kListenerLost);
  ASSERT_EQ(dials_.size(), static_cast<size_t>(kListenerLostAfter));
  EXPECT_EQ(dials_[0] - start_, seconds(10)) << "the check interval";
  EXPECT_EQ(dials_[1] - dials_[0], kListenerRecheck);
  EXPECT_EQ(dial_deadlines_[0], kListenerCheckDeadline);
  ASSERT_EQ(stops_.size(), 1u);
  EXPECT_EQ(stops_[0], hours(6)) << "jobs in flight still drain";
  EXPECT_THAT(log_.str(), HasSubstr("exiting: listener lost"));
  EXPECT_EQ(CountLines("error"), 1);
  EXPECT_EQ(CountLines("warning"), kListenerLostAfter);
  // What /healthz and the metrics read.
  EXPECT_TRUE(reading_.listener_lost);
  EXPECT_EQ(reading_.listener_unanswered,
            static_cast<uint64_t>(kListenerLostAfter));
  EXPECT_EQ(reading_.listener_answered, 0u);
}

// The listener check runs on its own cadence in every configuration: with
// idle polling off, with a poll interval far longer than the check, and
// with a failure limit that never slows polling down.
TEST_F(RetirementTest, TheListenerIsCheckedWhateverTheIdleSettings) {
  for (const auto& [name, timeout, interval] :
       std::vector<std::tuple<std::string, Duration, Duration>>{
           {"idle timeout 0", Duration::zero(), seconds(15)},
           {"poll every 60 s", seconds(600), seconds(60)},
           {"defaults", seconds(600), seconds(15)}}) {
    options_.idle_timeout = timeout;
    options_.idle_poll_interval = interval;
    options_.idle_poll_failure_limit = 1'000'000;
    dials_.clear();
    dial_script_ = {absl::OkStatus(), absl::OkStatus(),
                    absl::UnavailableError("failed to connect")};
    Script({0.0});
    const Retirement exit = Run();
    EXPECT_EQ(exit.reason, ExitReason::kListenerLost) << name;
    ASSERT_EQ(dials_.size(), 2u + kListenerLostAfter) << name;
    EXPECT_EQ(dials_[1] - dials_[0], seconds(10)) << name;
    EXPECT_LE(clock_.Now() - start_, seconds(20) + ListenerLostBound(options_))
        << name << ": lost after the second check";
  }
}

// At the defaults the worker gives up on a lost listener within 30 s,
// even when every call to it waits its whole deadline, idle polls
// included: none runs between the checks that count.
TEST_F(RetirementTest, AListenerLostIsNoticedWithinTheBound) {
  EXPECT_EQ(ListenerLostBound(RetirementOptions{}), seconds(26));
  EXPECT_EQ(ListenerLostBound({.idle_timeout = Duration::zero()}), seconds(21))
      << "no poll in the way";
  // Lost right after the first check, at 10 s: from then on each dial and
  // each poll waits its whole deadline, as calls to a dead listener do.
  std::optional<TimePoint> lost_at;
  int polls_after_a_failed_dial = 0;
  struct SlowOnceLost : IdleSource {
    SlowOnceLost(FakeClock& clock, std::optional<TimePoint>& lost_at,
                 int& counted, const std::vector<TimePoint>& dials)
        : clock(clock), lost_at(lost_at), counted(counted), dials(dials) {}
    absl::StatusOr<double> IdleTime(Duration timeout) override {
      if (!lost_at) return 0.0;
      if (dials.size() > 1) ++counted;
      clock.Advance(timeout);
      return absl::DeadlineExceededError("Deadline Exceeded");
    }
    absl::Status Close() override { return absl::OkStatus(); }
    FakeClock& clock;
    std::optional<TimePoint>& lost_at;
    int& counted;
    const std::vector<TimePoint>& dials;
  };
  RetirementPolicy::Hooks hooks = Hooks();
  hooks.connect = [&]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
    return std::make_unique<SlowOnceLost>(clock_, lost_at,
                                          polls_after_a_failed_dial, dials_);
  };
  hooks.dial_fresh = [&](Duration deadline) -> absl::Status {
    dials_.push_back(clock_.Now());
    if (!lost_at) {
      lost_at = clock_.Now();
      return absl::OkStatus();
    }
    clock_.Advance(deadline);
    return absl::DeadlineExceededError("Deadline Exceeded");
  };
  start_ = clock_.Now();
  RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), hooks);
  EXPECT_EQ(reaper.Run().reason, ExitReason::kListenerLost);
  ASSERT_TRUE(lost_at.has_value());
  EXPECT_LE(clock_.Now() - *lost_at, ListenerLostBound(options_));
  EXPECT_EQ(polls_after_a_failed_dial, 0);
}

TEST_F(RetirementTest, AnAnsweredDialClearsTheCount) {
  options_.max_lifetime = seconds(100);
  dial_script_ = {absl::UnavailableError("x"),
                  absl::UnavailableError("x"),
                  absl::OkStatus(),
                  absl::UnavailableError("x"),
                  absl::UnavailableError("x"),
                  absl::OkStatus()};
  Script({5.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
  EXPECT_THAT(log_.str(), HasSubstr("answered again"));
}

// A refusal or a failed handshake is an answer: the listener accepted the
// connection.
TEST_F(RetirementTest, ARefusedDialIsAnAnswer) {
  options_.max_lifetime = seconds(100);
  dial_script_ = {absl::PermissionDeniedError("Idle: permission denied"),
                  absl::UnavailableError("Handshake failed")};
  Script({5.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
}

// While this process cannot open a descriptor a failed dial says nothing of
// the listener: checked every second, counted only once it can.
TEST_F(RetirementTest, DialsFailedWithoutDescriptorsDoNotCount) {
  options_.max_lifetime = seconds(60);
  dial_script_ = {absl::UnavailableError("socket: Too many open files")};
  descriptors_ = false;
  Script({5.0});
  EXPECT_EQ(Run().reason, ExitReason::kMaxLifetime);
  EXPECT_GE(dials_.size(), 45u) << "every second from 10 s";
  EXPECT_EQ(CountLines("warning"), 1) << "said once";
  descriptors_ = true;
  dials_.clear();
  EXPECT_EQ(Run().reason, ExitReason::kListenerLost);
}

// gRPC said it could not accept: the listener is checked at once, not at
// the next tick of the cadence.
TEST_F(RetirementTest, CheckListenerSoonChecksOnTheNextTurn) {
  options_.idle_timeout = Duration::zero();
  options_.max_lifetime = seconds(5);
  RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), Hooks());
  reaper.CheckListenerSoon();
  start_ = clock_.Now();
  EXPECT_EQ(reaper.Run().reason, ExitReason::kMaxLifetime);
  ASSERT_EQ(dials_.size(), 1u) << "before the first 10 s tick";
  EXPECT_EQ(dials_[0], start_);
}

// The exit event: what the fields say, after an idle exit.
TEST_F(RetirementTest, TheExitEventSaysWhatEachFieldMeans) {
  options_.max_lifetime = seconds(1000);
  options_.max_lifetime_jitter = seconds(100);
  options_.draw_jitter = [](Duration) { return seconds(40); };
  idle_at_request_ = std::chrono::milliseconds(601'500);
  Script({0.0, 0.0, 601.0});
  const Retirement exit = Run();
  EXPECT_EQ(exit.reason, ExitReason::kIdle);
  EXPECT_EQ(exit.idle_seconds, 601.5) << "the worker's, at the request";
  const std::string log = log_.str();
  EXPECT_THAT(log, HasSubstr("exit_reason=idle"));
  EXPECT_THAT(log, HasSubstr("uptime_seconds=45"));
  EXPECT_THAT(log, HasSubstr("idle_seconds=601.5"));
  EXPECT_THAT(log, HasSubstr("max_lifetime_seconds=960"));
  EXPECT_THAT(log, HasSubstr("max_lifetime_configured_seconds=1000"));
  EXPECT_THAT(log, HasSubstr("max_lifetime_jitter_seconds=40"));
  EXPECT_THAT(log, HasSubstr("stop_request_idle=21600"));
}

TEST_F(RetirementTest, ErrorWithMaxLifetimeDisabledPromisesNoBackstop) {
  options_.idle_poll_failure_limit = 1;
  options_.max_lifetime = Duration::zero();
  Script({absl::DeadlineExceededError("slow")});
  // Nothing else can end this loop: a signal "arrives" at the wait after
  // the failed poll.
  clock_.SetWaitHook([this](TimePoint) {
    if (!source_.polls.empty()) shutdown_.Stop(StopCause::kSignal);
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
  options_.listener_check_interval = hours(1);  // the first wait: to 15 s
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
  RetirementPolicy::Hooks hooks = Hooks();
  hooks.connect = []() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
    return absl::InvalidArgumentError("no address");
  };
  RetirementPolicy reaper(options_, clock_, shutdown_.watcher(), hooks);
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
      {.connect = [&]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
        return std::make_unique<Busy>(polls);
      }});
  const TimePoint start = std::chrono::steady_clock::now();
  std::thread signaller([&] { shutdown.Stop(StopCause::kSignal); });
  const Retirement exit = reaper.Run();
  signaller.join();
  EXPECT_EQ(exit.reason, ExitReason::kSignal);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1))
      << "returned long before the one-hour wait ended";
}

// Shutdown::Wake ends the loop's wait without a stop, so that a listener
// check asked for from another thread runs at once.
TEST(RetirementRealClockTest, AWakeRunsAListenerCheckAtOnce) {
  RetirementOptions options;
  options.idle_timeout = Duration::zero();
  options.listener_check_interval = hours(1);
  Shutdown shutdown;
  std::atomic<int> dials{0};
  RetirementPolicy reaper(options, SteadyClock::Get(), shutdown.watcher(),
                          {.dial_fresh = [&](Duration) {
                            if (++dials == 1) shutdown.Stop();
                            return absl::OkStatus();
                          }});
  std::thread gRPC([&] {
    reaper.CheckListenerSoon();
    shutdown.Wake();
  });
  const TimePoint start = std::chrono::steady_clock::now();
  const Retirement exit = reaper.Run();
  gRPC.join();
  EXPECT_EQ(exit.reason, ExitReason::kRequested);
  EXPECT_EQ(dials, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
}

}  // namespace
}  // namespace cfdb::worker

// The throttle of client-caused log lines, on a fake clock.
#include "core/log_throttle.h"

#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/log_capture.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;

class LogThrottleTest : public ::testing::Test {
 protected:
  std::vector<std::string> Lines() const {
    return absl::StrSplit(log_.str(), '\n', absl::SkipEmpty());
  }

  FakeClock clock_;
  test_support::LogCapture log_;
  LogThrottle throttle_{clock_, seconds(10)};
};

TEST_F(LogThrottleTest, OneLinePerKindPerPeriodThenTheCount) {
  for (int i = 0; i < 300; ++i) {
    throttle_.Log("stop", spdlog::level::info, absl::StrCat("stop ", i));
  }
  clock_.Advance(seconds(10) - milliseconds(1));
  throttle_.Log("stop", spdlog::level::info, "stop late");
  EXPECT_THAT(Lines(), ElementsAre("info stop 0")) << "one tick early: held";
  clock_.Advance(milliseconds(1));
  throttle_.Log("stop", spdlog::level::info, "stop next");
  EXPECT_THAT(Lines(),
              ElementsAre("info stop 0",
                          "info stop next (and 300 more like it since the "
                          "last) (suppressed=300)"));
}

TEST_F(LogThrottleTest, KindsAreCountedApart) {
  throttle_.Log("a", spdlog::level::info, "a 1");
  throttle_.Log("b", spdlog::level::warn, "b 1");
  throttle_.Log("a", spdlog::level::info, "a 2");
  EXPECT_THAT(Lines(), ElementsAre("info a 1", "warning b 1"));
}

TEST_F(LogThrottleTest, FlushTellsWhatNoLaterLineDidOnce) {
  throttle_.Log("cut", spdlog::level::warn, "cut 1");
  throttle_.Log("cut", spdlog::level::warn, "cut 2");
  throttle_.Log("cut", spdlog::level::warn, "cut 3");
  throttle_.Log("quiet", spdlog::level::info, "quiet 1");
  throttle_.Flush();
  throttle_.Flush();
  EXPECT_THAT(Lines(), ElementsAre("warning cut 1", "info quiet 1",
                                   "warning cut: 2 more lines not logged "
                                   "(suppressed=2, log_kind=cut)"));
}

TEST_F(LogThrottleTest, KindsPastTheBoundShareOne) {
  for (std::size_t i = 0; i < kMaxLogKinds + 50; ++i) {
    throttle_.Log(absl::StrCat("identity ", i), spdlog::level::info, "denied");
  }
  EXPECT_EQ(Lines().size(), kMaxLogKinds + 1) << "each kind once, then one";
  throttle_.Flush();
  EXPECT_EQ(Lines().back(),
            "info (other kinds): 49 more lines not logged (suppressed=49, "
            "log_kind=(other kinds))");
}

}  // namespace
}  // namespace cfdb::worker

// cfdb::worker::Serve's refusals, which come before it does anything (so
// they can be asked in-process), and the exit codes the binary makes of
// what it returns. Serving itself: tests/examples, tests/daemon/cli_test.
#include "cfdb/worker/serve.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using ::testing::HasSubstr;

// Environment returns a lookup of `variables` only.
std::function<std::optional<std::string>(std::string_view)> Environment(
    std::map<std::string, std::string, std::less<>> variables) {
  return [variables](std::string_view name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

// Refused reports that `register_kinds` was never called.
absl::Status Refused(const ServeOptions& options) {
  bool registered = false;
  absl::Status s = Serve(options, [&registered](Worker&) {
    registered = true;
    return absl::OkStatus();
  });
  EXPECT_FALSE(registered) << "nothing is done with a refused configuration";
  return s;
}

TEST(ServeTest, AFlagServeDoesNotHaveIsRefusedWithTheNearestOne) {
  const absl::Status s = Refused(
      {.flags = {{"--idle-timeout", "60"}}, .environment = Environment({})});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            "--idle-timeout: not a flag of serve; did you mean "
            "--idle-timeout-seconds?");
  EXPECT_TRUE(
      absl::IsInvalidArgument(Refused({.flags = {{"--address", "127.0.0.1:1"}},
                                       .environment = Environment({})})))
      << "a client knob is not serve's";
}

TEST(ServeTest, ABadValueIsRefusedNamingWhereItCameFrom) {
  const absl::Status flag =
      Refused({.flags = {{"--port", "http"}}, .environment = Environment({})});
  EXPECT_TRUE(absl::IsInvalidArgument(flag)) << flag;
  EXPECT_THAT(flag.message(), HasSubstr("--port: 'http'"));

  // The variables come from ServeOptions::environment when it is set.
  // (Were it not read, this would serve, briefly: a second at most.)
  const absl::Status variable =
      Refused({.flags = {{"--port", "0"},
                         {"--max-lifetime-seconds", "1"},
                         {"--max-lifetime-jitter-seconds", "0"}},
               .environment = Environment(
                   {{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "soon"}})});
  EXPECT_TRUE(absl::IsInvalidArgument(variable)) << variable;
  EXPECT_THAT(variable.message(),
              HasSubstr("CFDB_WORKER_IDLE_TIMEOUT_SECONDS: 'soon'"));
}

TEST(ServeTest, ExitCodesAreTheBinarys) {
  EXPECT_EQ(ServeExitCode(absl::OkStatus()), 0);
  EXPECT_EQ(ServeExitCode(absl::InvalidArgumentError("--port")), 2);
  EXPECT_EQ(ServeExitCode(absl::PermissionDeniedError("--job-user")), 2);
  EXPECT_EQ(ServeExitCode(absl::UnavailableError("listener lost")), 1);
  EXPECT_EQ(ServeExitCode(absl::FailedPreconditionError("port in use")), 1);
}

}  // namespace
}  // namespace cfdb::worker

// cfdb::worker::Serve's refusals, which come before it does anything (so
// they can be asked in-process), and the exit codes the binary makes of
// what it returns. Serving itself: tests/examples, tests/cli/cli_test.
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
absl::Status Refused(const ServeConfig& config) {
  bool registered = false;
  absl::Status s = Serve(config, [&registered](Worker&) {
    registered = true;
    return absl::OkStatus();
  });
  EXPECT_FALSE(registered) << "nothing is done with a refused configuration";
  return s;
}

// FromFlags is ServeConfigFromFlags' refusal of `flags` with `variables`.
absl::Status FromFlags(
    const KnobValues& flags,
    std::map<std::string, std::string, std::less<>> variables = {}) {
  return ServeConfigFromFlags(flags, Environment(std::move(variables)))
      .status();
}

TEST(ServeTest, AFlagServeDoesNotHaveIsRefusedWithTheNearestOne) {
  const absl::Status s = FromFlags({{"--idle-timeout", "60"}});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            "--idle-timeout: not a flag of serve; did you mean "
            "--idle-timeout-seconds?");
  EXPECT_TRUE(
      absl::IsInvalidArgument(FromFlags({{"--address", "127.0.0.1:1"}})))
      << "a client knob is not serve's";
}

TEST(ServeTest, ABadValueIsRefusedNamingWhereItCameFrom) {
  const absl::Status flag = FromFlags({{"--port", "http"}});
  EXPECT_TRUE(absl::IsInvalidArgument(flag)) << flag;
  EXPECT_THAT(flag.message(), HasSubstr("--port: 'http'"));

  // The variables come from the lookup given, when one is.
  const absl::Status variable = FromFlags(
      {{"--port", "0"}}, {{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "soon"}});
  EXPECT_TRUE(absl::IsInvalidArgument(variable)) << variable;
  EXPECT_THAT(variable.message(),
              HasSubstr("CFDB_WORKER_IDLE_TIMEOUT_SECONDS: 'soon'"));
}

// A typed configuration is held to the same rules before anything starts,
// its refusals naming the flag of the field at fault.
TEST(ServeTest, ATypedConfigurationIsCheckedAsFlagsAre) {
  ServeConfig config;
  config.retirement.idle_poll_deadline = std::chrono::seconds(20);
  const absl::Status deadline = Refused(config);
  EXPECT_TRUE(absl::IsInvalidArgument(deadline)) << deadline;
  EXPECT_THAT(deadline.message(),
              HasSubstr("--idle-poll-deadline-seconds: '20' is longer than "
                        "the idle poll interval (15 s)"));

  ServeConfig open;
  open.host = "0.0.0.0";
  const absl::Status plaintext = Refused(open);
  EXPECT_TRUE(absl::IsInvalidArgument(plaintext)) << plaintext;
  EXPECT_THAT(plaintext.message(),
              HasSubstr("--host: '0.0.0.0' is not a loopback address"));

  ServeConfig admitted;
  admitted.admit.control = {"api.example"};
  EXPECT_THAT(Refused(admitted).message(),
              HasSubstr("--tls-admit-control: 'api.example' needs mutual TLS"));
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

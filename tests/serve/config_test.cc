#include "serve/config.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serve/address.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

using Flags = std::map<std::string, std::string, std::less<>>;
using Env = std::map<std::string, std::string, std::less<>>;

EnvLookup FakeEnv(Env env) {
  return [env = std::move(env)](
             std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigTest, DefaultsWithNoFlagsAndNoVariables) {
  absl::StatusOr<ServeConfig> c = ResolveServeConfig({}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 50051);
  EXPECT_EQ(c->retirement.idle_timeout, seconds(600));
  EXPECT_EQ(c->retirement.idle_poll_interval, seconds(15));
  EXPECT_EQ(c->retirement.idle_poll_deadline, seconds(5));
  EXPECT_EQ(c->retirement.idle_poll_failure_limit, 20);
  EXPECT_EQ(c->retirement.listener_check_interval, seconds(10));
  EXPECT_EQ(c->retirement.max_lifetime, seconds(43200));
  EXPECT_EQ(c->retirement.max_lifetime_grace, seconds(21600));
  EXPECT_EQ(c->retirement.max_lifetime_jitter, seconds(4320));
  EXPECT_EQ(c->retirement.signal_grace, Duration::zero());
  EXPECT_EQ(c->worker.max_concurrent_tasks,
            std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(c->worker.task_kill_grace, seconds(10));
  EXPECT_EQ(c->worker.job_nice, 10);
  EXPECT_EQ(c->log_level, "info");
  EXPECT_EQ(c->scale_in.hold, seconds(60));
  EXPECT_EQ(c->worker.output_buffer_bytes, 4u << 20);
  EXPECT_EQ(c->worker.result_ttl, seconds(300));
}

// The holds (ECS protection's and the pod deletion cost's) are at most the
// idle timeout, given or defaulted: past it the worker has retired and no
// job can come. No idle timeout: as given.
TEST(ConfigTest, TheProtectionHoldsAreAtMostTheIdleTimeout) {
  struct Case {
    Flags flags;
    Duration hold;
  };
  for (const std::string flag :
       {"--ecs-protection-hold-seconds", "--k8s-hold-seconds"}) {
    for (const Case& c :
         {Case{{{"--idle-timeout-seconds", "20"}}, seconds(20)},
          Case{{{"--idle-timeout-seconds", "61"}}, seconds(60)},
          Case{{{"--idle-timeout-seconds", "0"}}, seconds(60)},
          Case{{{"--idle-timeout-seconds", "20"}, {flag, "5"}}, seconds(5)},
          Case{{{"--idle-timeout-seconds", "20"}, {flag, "300"}}, seconds(20)},
          Case{{{"--idle-timeout-seconds", "0"}, {flag, "300"}}, seconds(300)},
          Case{{{flag, "0"}}, Duration::zero()}}) {
      absl::StatusOr<ServeConfig> config =
          ResolveServeConfig(c.flags, FakeEnv({}));
      ASSERT_TRUE(config.ok()) << config.status();
      const Duration hold = flag.starts_with("--ecs")
                                ? config->scale_in.hold
                                : config->deletion_cost.hold;
      EXPECT_EQ(hold, c.hold) << c.flags.begin()->second << " "
                              << c.flags.rbegin()->second << " " << flag;
    }
  }
}

TEST(ConfigTest, VariablesOverrideDefaults) {
  absl::StatusOr<ServeConfig> c = ResolveServeConfig(
      {}, FakeEnv({{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "30"},
                   {"CFDB_WORKER_IDLE_POLL_INTERVAL_SECONDS", "2.5"},
                   {"CFDB_WORKER_IDLE_POLL_FAILURE_LIMIT", "3"},
                   {"CFDB_WORKER_LISTENER_CHECK_INTERVAL_SECONDS", "2.5"},
                   {"CFDB_WORKER_MAX_LIFETIME_SECONDS", "90"},
                   {"CFDB_WORKER_MAX_LIFETIME_GRACE_SECONDS", "7"},
                   {"CFDB_WORKER_PORT", "0"},
                   {"CFDB_WORKER_MAX_CONCURRENT_TASKS", "5"},
                   {"CFDB_WORKER_JOB_OUTPUT_BUFFER_MIB", "16"},
                   {"CFDB_WORKER_JOB_RESULT_TTL_SECONDS", "0.5"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retirement.idle_timeout, seconds(30));
  EXPECT_EQ(c->retirement.idle_poll_interval, std::chrono::milliseconds(2500));
  EXPECT_EQ(c->retirement.idle_poll_deadline, std::chrono::milliseconds(2500))
      << "the default deadline is clamped to a shorter interval";
  EXPECT_EQ(c->retirement.idle_poll_failure_limit, 3);
  EXPECT_EQ(c->retirement.listener_check_interval,
            std::chrono::milliseconds(2500));
  EXPECT_EQ(c->retirement.max_lifetime, seconds(90));
  EXPECT_EQ(c->retirement.max_lifetime_jitter, seconds(9))
      << "unless given, a tenth of the max lifetime";
  EXPECT_EQ(c->retirement.max_lifetime_grace, seconds(7));
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(c->worker.max_concurrent_tasks, 5u);
  EXPECT_EQ(c->worker.output_buffer_bytes, 16u << 20);
  EXPECT_EQ(c->worker.result_ttl, std::chrono::milliseconds(500));
}

TEST(ConfigTest, FlagsBeatVariables) {
  absl::StatusOr<ServeConfig> c = ResolveServeConfig(
      Flags{{"--idle-timeout-seconds", "45"}, {"--host", "0.0.0.0"}},
      FakeEnv({{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "30"},
               {"CFDB_WORKER_HOST", "10.0.0.1"},
               {"CFDB_WORKER_ALLOW_INSECURE", "true"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retirement.idle_timeout, seconds(45));
  EXPECT_EQ(c->host, "0.0.0.0");
}

TEST(ConfigTest, PlaintextOnANonLoopbackHostIsRefusedUnlessAllowed) {
  absl::StatusOr<ServeConfig> refused =
      ResolveServeConfig(Flags{{"--host", "0.0.0.0"}}, FakeEnv({}));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("--allow-insecure"));
  absl::StatusOr<ServeConfig> allowed = ResolveServeConfig(
      Flags{{"--host", "0.0.0.0"}, {"--allow-insecure", "true"}}, FakeEnv({}));
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_TRUE(allowed->allow_insecure);
}

TEST(ConfigTest, PartialTlsIsRefusedNamingWhatIsMissing) {
  absl::StatusOr<ServeConfig> c =
      ResolveServeConfig(Flags{{"--tls-cert", "/etc/worker.pem"}},
                         FakeEnv({{"CFDB_WORKER_TLS_KEY", "/etc/worker.key"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("missing: --tls-ca"));
}

TEST(ConfigTest, UnreadableTlsFileIsRefusedWithThePathAndReason) {
  absl::StatusOr<ServeConfig> c = ResolveServeConfig(
      {}, FakeEnv({{"CFDB_WORKER_TLS_CA", "/nonexistent/ca.pem"},
                   {"CFDB_WORKER_TLS_CERT", "/nonexistent/cert.pem"},
                   {"CFDB_WORKER_TLS_KEY", "/nonexistent/key.pem"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(
      std::string(c.status().message()),
      HasSubstr("CFDB_WORKER_TLS_CA: /nonexistent/ca.pem: cannot read"));
}

TEST(ConfigTest, NegativeGraceMeansWithoutLimit) {
  absl::StatusOr<ServeConfig> c =
      ResolveServeConfig(Flags{{"--signal-grace-seconds", "-1"}}, FakeEnv({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LT(c->retirement.signal_grace, Duration::zero());
}

// Jobs as the worker's own uid could read its credentials and signal it:
// a job uid range that includes it is refused, and one beside it is not.
TEST(ConfigTest, JobUidsThatIncludeTheWorkersOwnAreRefused) {
  // As root the worker drops to --worker-user; otherwise it stays itself.
  const uid_t worker_uid = geteuid() == 0 ? 10001 : geteuid();
  if (worker_uid < 5) GTEST_SKIP() << "needs 4 uids below the worker's";
  Flags flags{{"--max-concurrent-tasks", "4"}, {"--worker-user", "10001"}};
  for (const uid_t first : {worker_uid - 3, worker_uid}) {
    flags["--job-user"] = std::to_string(first);
    absl::StatusOr<ServeConfig> c = ResolveServeConfig(flags, FakeEnv({}));
    ASSERT_FALSE(c.ok()) << first;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(c.status().message()),
        HasSubstr(absl::StrCat("--job-user: '", first, "' gives jobs uids ",
                               first, "..", first + 3)));
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr(absl::StrCat("the worker's own uid ", worker_uid)));
  }
  for (const uid_t first : {worker_uid - 4, worker_uid + 1}) {
    flags["--job-user"] = std::to_string(first);
    EXPECT_TRUE(ResolveServeConfig(flags, FakeEnv({})).ok()) << first;
  }
}

struct BadValue {
  std::string knob;  // a flag, or a variable if it starts with CFDB_
  std::string value;
  std::string expect;  // part of the message
};

void PrintTo(const BadValue& bad, std::ostream* os) {
  *os << bad.knob << "='" << bad.value << "'";
}

class BadValueTest : public ::testing::TestWithParam<BadValue> {};

TEST_P(BadValueTest, IsRefusedNamingTheKnob) {
  const BadValue& bad = GetParam();
  Flags flags;
  Env env;
  if (bad.knob.starts_with("CFDB_")) {
    env[bad.knob] = bad.value;
  } else {
    flags[bad.knob] = bad.value;
  }
  absl::StatusOr<ServeConfig> c = ResolveServeConfig(flags, FakeEnv(env));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(bad.knob));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(bad.expect));
}

INSTANTIATE_TEST_SUITE_P(
    Config, BadValueTest,
    ::testing::Values(
        BadValue{"--idle-timeout-seconds", "ten", "not a number"},
        BadValue{"CFDB_WORKER_IDLE_TIMEOUT_SECONDS", "ten", "not a number"},
        BadValue{"--idle-timeout-seconds", "-1", "negative"},
        BadValue{"--max-lifetime-seconds", "nan", "not a finite number"},
        BadValue{"CFDB_WORKER_MAX_LIFETIME_SECONDS", "inf", "not a finite"},
        BadValue{"--idle-poll-interval-seconds", "0", "greater than 0"},
        BadValue{"--idle-poll-deadline-seconds", "0", "greater than 0"},
        BadValue{"--idle-poll-deadline-seconds", "20",
                 "longer than the idle poll interval"},
        BadValue{"--idle-poll-failure-limit", "0", "outside 1.."},
        BadValue{"--idle-poll-failure-limit", "2.5", "not a whole number"},
        BadValue{"--listener-check-interval-seconds", "0", "greater than 0"},
        BadValue{"CFDB_WORKER_LISTENER_CHECK_INTERVAL_SECONDS", "-1",
                 "must be greater than 0"},
        BadValue{"--port", "70000", "outside 0..65535"},
        BadValue{"CFDB_WORKER_PORT", "-1", "outside 0..65535"},
        BadValue{"--max-concurrent-tasks", "0", "outside 1.."},
        BadValue{"--task-kill-grace-seconds", "-3", "negative"},
        BadValue{"--max-lifetime-jitter-seconds", "-1", "negative"},
        BadValue{"--ecs-protection-expires-minutes", "0", "outside 1..2880"},
        BadValue{"--metrics-interval-seconds", "0.001", "under 1 s"},
        BadValue{"--ecs-protection-hold-seconds", "-1", "negative"},
        BadValue{"CFDB_WORKER_ECS_PROTECTION_HOLD_SECONDS", "soon",
                 "not a number"},
        BadValue{"CFDB_WORKER_ECS_PROTECTION_EXPIRES_MINUTES", "2881",
                 "outside 1..2880"},
        BadValue{"CFDB_WORKER_ECS_SCALE_IN_PROTECTION", "often",
                 "not true or false"},
        BadValue{"--uds", "worker.sock", "must be an absolute file name"},
        BadValue{"CFDB_WORKER_UDS", "unix:/tmp/w.sock", "absolute file name"},
        BadValue{"--uds", "/no/such/directory/w.sock", "not a directory"},
        BadValue{"--uds", "/tmp/" + std::string(120, 'x'), "is too long"},
        BadValue{"--job-output-buffer-mib", "0", "outside 1..1024"},
        BadValue{"CFDB_WORKER_JOB_OUTPUT_BUFFER_MIB", "2048",
                 "outside 1..1024"},
        BadValue{"--job-result-ttl-seconds", "-1", "negative"},
        BadValue{"CFDB_WORKER_JOB_RESULT_TTL_SECONDS", "later", "not a number"},
        BadValue{"--job-nice", "20", "outside 0..19"},
        BadValue{"CFDB_WORKER_JOB_NICE", "-1", "outside 0..19"},
        BadValue{"--log-level", "loud",
                 "is not trace, debug, info, warn, error, critical or off"},
        BadValue{"--host", "", "empty"},
        BadValue{"--max-concurrent-tasks", "", "not a whole number"},
        BadValue{"--tls-ca", "", "empty"},
        BadValue{"--job-containment", "jail", "not auto, cgroup or subreaper"},
        BadValue{"--job-user", "no-such-user-here", "no user named"},
        BadValue{"--job-user", "0", "root is no sandbox"},
        BadValue{"--job-nproc", "-1", "outside 0.."},
        BadValue{"--tls-ca-env", "NOT_SET_ANYWHERE", "not set"},
        BadValue{"CFDB_WORKER_ALLOW_INSECURE", "maybe", "not true or false"},
        BadValue{"--tls-refresh-interval-seconds", "x", "not a number"}));

TEST(LoopbackTargetTest, DialsLoopbackForWildcardAndLoopbackHosts) {
  EXPECT_EQ(LoopbackTarget("0.0.0.0", 9000), "127.0.0.1:9000");
  EXPECT_EQ(LoopbackTarget("127.0.0.1", 9000), "127.0.0.1:9000");
  EXPECT_EQ(LoopbackTarget("localhost", 9000), "127.0.0.1:9000");
  EXPECT_EQ(LoopbackTarget("::", 9000), "[::1]:9000");
  EXPECT_EQ(LoopbackTarget("10.1.2.3", 9000), "10.1.2.3:9000")
      << "a specific address is dialled as it is";
}

TEST(TargetHasPortTest, EveryTargetGrpcDialsNamesItsPort) {
  for (const char* target :
       {"127.0.0.1:50051", "localhost:1", "[::1]:50051", "dns:///host:9",
        "dns://8.8.8.8/host:9", "ipv4:10.0.0.1:80", "ipv6:[::1]:80",
        "unix:/run/w.sock", "unix-abstract:w"}) {
    EXPECT_TRUE(TargetHasPort(target)) << target;
  }
  for (const char* target :
       {"localhost", "127.0.0.1", "::1", "[::1]", "host:", ":50051",
        "host:http", "dns:///host", "dns://8.8.8.8", "10.0.0.1:5x"}) {
    EXPECT_FALSE(TargetHasPort(target)) << "'" << target << "'";
  }
}

TEST(ConfigTest, AnAddressWithoutAPortIsRefusedNotDialledOn443) {
  for (const auto& [flags, env, source] :
       {std::tuple{Flags{{"--address", "localhost"}}, Env{}, "--address"},
        std::tuple{Flags{}, Env{{"CFDB_WORKER_ADDRESS", "10.0.0.5"}},
                   "CFDB_WORKER_ADDRESS"}}) {
    absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, FakeEnv(env));
    ASSERT_FALSE(c.ok()) << source;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr(absl::StrCat(source, ": '")));
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("has no port"));
  }
}

TEST(IsLoopbackHostTest, OnlyLoopbackLiteralsAndLocalhost) {
  for (const char* host :
       {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host :
       {"127.evil.example", "127.0.0.1.nip.io", "127.0.0.1 ", " 127.0.0.1",
        "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "localhost.example", "",
        "[127.0.0.1]"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << "'" << host << "'";
  }
}

TEST(ConfigTest, APrefixThatLooksLikeLoopbackStillNeedsTls) {
  absl::StatusOr<ServeConfig> c =
      ResolveServeConfig(Flags{{"--host", "127.evil.example"}}, FakeEnv({}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("not a loopback"));
}

// One rule for every knob: a variable set to "" is unset, so the default
// applies; the same configuration as no variable at all.
TEST(ConfigTest, AnEmptyVariableMeansUnsetForEveryKnob) {
  absl::StatusOr<ServeConfig> defaults = ResolveServeConfig({}, FakeEnv({}));
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  for (const Knob* knob : ServeKnobs()) {
    absl::StatusOr<ServeConfig> c =
        ResolveServeConfig({}, FakeEnv({{std::string(knob->variable), ""}}));
    ASSERT_TRUE(c.ok()) << knob->variable << ": " << c.status();
    EXPECT_EQ(c->port, defaults->port) << knob->variable;
    EXPECT_EQ(c->host, defaults->host) << knob->variable;
    EXPECT_EQ(c->retirement.idle_timeout, defaults->retirement.idle_timeout);
    EXPECT_EQ(c->worker.max_concurrent_tasks,
              defaults->worker.max_concurrent_tasks);
    EXPECT_EQ(*MakeCredentials(c->tls), *MakeCredentials(defaults->tls))
        << knob->variable;
  }
  for (const Knob* knob : KnobsOf(KnobScope::kClient)) {
    absl::StatusOr<ClientConfig> c =
        ResolveClientConfig({}, FakeEnv({{std::string(knob->variable), ""}}));
    ASSERT_TRUE(c.ok()) << knob->variable << ": " << c.status();
    EXPECT_EQ(c->address, "127.0.0.1:50051");
    EXPECT_EQ(c->attempts, 1);
  }
}

TEST(ConfigTest, ClientKnobsFollowTheSameRules) {
  absl::StatusOr<ClientConfig> c =
      ResolveClientConfig(Flags{{"--attempts", "3"}},
                          FakeEnv({{"CFDB_WORKER_ADDRESS", "10.0.0.5:9"},
                                   {"CFDB_WORKER_ATTEMPTS", "7"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->address, "10.0.0.5:9");
  EXPECT_EQ(c->attempts, 3) << "the flag beats its variable";
  absl::StatusOr<ClientConfig> bad =
      ResolveClientConfig({}, FakeEnv({{"CFDB_WORKER_ATTEMPTS", "0"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("CFDB_WORKER_ATTEMPTS: '0' is outside 1..1000"));
}

// The client commands' own flags: the knobs' rules and words.
TEST(ConfigTest, FlagValuesAreCheckedAndWordedAsKnobsAre) {
  EXPECT_EQ(
      *ParseSecondsFlag("--timeout-seconds", "2.5", SecondsRange::kPositive),
      2.5);
  EXPECT_EQ(*ParseSecondsFlag("--grace-seconds", "-1", SecondsRange::kAny), -1);
  const struct {
    const char* text;
    SecondsRange range;
    const char* message;
  } kBad[] = {
      {"0", SecondsRange::kPositive, "--f: '0' must be greater than 0"},
      {"-0.5", SecondsRange::kNonNegative, "--f: '-0.5' is negative"},
      {"inf", SecondsRange::kAny, "--f: 'inf' is not a finite number"},
      {"abc", SecondsRange::kAny, "--f: 'abc' is not a number"},
  };
  for (const auto& bad : kBad) {
    absl::StatusOr<double> parsed =
        ParseSecondsFlag("--f", bad.text, bad.range);
    ASSERT_FALSE(parsed.ok()) << bad.text;
    EXPECT_EQ(parsed.status().message(), bad.message);
  }
  EXPECT_EQ(ParseIntegerFlag("--n", "5000", 1, 4096).status().message(),
            "--n: '5000' is outside 1..4096");
}

// Each number knob's range, from the table, is what the configuration
// refuses: a value just past either end is refused naming the knob.
TEST(ConfigTest, EveryNumberKnobRefusesValuesPastItsRange) {
  int checked = 0;
  for (const Knob& row : AllKnobs()) {
    const Knob* knob = &row;
    if (knob->type != KnobType::kInteger && knob->type != KnobType::kSeconds)
      continue;
    const double step = knob->type == KnobType::kInteger ? 1 : 0.5;
    std::vector<double> outside;
    if (std::isfinite(knob->range.min)) {
      outside.push_back(knob->range.above_min ? knob->range.min
                                              : knob->range.min - step);
    }
    if (std::isfinite(knob->range.max)) {
      outside.push_back(knob->range.max + step);
    }
    for (const double value : outside) {
      if (knob->range.or_zero && value == 0) continue;
      const std::string text = absl::StrCat(value);
      const Env env = {{std::string(knob->variable), text}};
      const absl::Status status =
          knob->scope() == KnobScope::kClient
              ? ResolveClientConfig({}, FakeEnv(env)).status()
              : ResolveServeConfig({}, FakeEnv(env)).status();
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr(absl::StrCat(std::string(knob->variable), ": '",
                                         text, "'")))
          << "range " << KnobRangeText(*knob);
      EXPECT_FALSE(CheckKnobValue(*knob, knob->variable, text).ok()) << text;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

TEST(ClosestNameTest, SuggestsOnlyWhatWasLikelyMeant) {
  const std::vector<std::string> names = {
      "--grace-seconds", "--grace", "--address", "--idle-threshold-seconds",
      "--idle-only"};
  EXPECT_EQ(ClosestName("--grce", names), "--grace");
  EXPECT_EQ(ClosestName("--adress", names), "--address");
  EXPECT_EQ(ClosestName("--idle-threshold", names), "--idle-threshold-seconds")
      << "the start of one name only";
  EXPECT_EQ(ClosestName("--idle", names), std::nullopt) << "of two";
  EXPECT_EQ(ClosestName("--x", names), std::nullopt);
  EXPECT_EQ(ClosestName("--verbose", names), std::nullopt);
  const std::vector<std::string> commands = {"serve", "stop", "reap"};
  EXPECT_EQ(ClosestName("stp", commands), "stop");
}

TEST(JoinHostPortTest, BracketsIpv6) {
  EXPECT_EQ(JoinHostPort("::1", 1), "[::1]:1");
  EXPECT_EQ(JoinHostPort("host", 2), "host:2");
}

}  // namespace
}  // namespace cfdb::worker

#include "cfdb/worker/errors.h"

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/rpcs.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cfdb::worker {
namespace {

// The table both clients are checked against (tests/data).
nlohmann::json SharedTable() {
  std::ifstream file(CFDB_ERROR_CASES);
  EXPECT_TRUE(file) << CFDB_ERROR_CASES;
  return file ? nlohmann::json::parse(file) : nlohmann::json::object();
}

// The table's method names and the Rpc each classifies as: the registry's
// (cfdb/worker/rpcs.h).
std::map<std::string, Rpc> Rpcs() {
  std::map<std::string, Rpc> rpcs;
  for (const RpcInfo& info : kRpcs) rpcs.emplace(info.name, info.rpc);
  return rpcs;
}

// FlagOf reads the registry flag named by the table's by_flag.
bool FlagOf(const RpcInfo& info, const std::string& flag) {
  const std::map<std::string, bool RpcInfo::*> flags = {
      {"follows_job", &RpcInfo::follows_job},
      {"may_start_job", &RpcInfo::may_start_job},
      {"finds_job", &RpcInfo::finds_job},
      {"conditional", &RpcInfo::conditional},
      {"capability", &RpcInfo::capability}};
  EXPECT_TRUE(flags.contains(flag)) << flag;
  return flags.contains(flag) && info.*flags.at(flag);
}

absl::StatusCode CodeNamed(const std::string& name) {
  for (int i = 1; i <= 16; ++i) {
    const auto code = static_cast<absl::StatusCode>(i);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return absl::StatusCode::kOk;
}

TEST(ClassifyErrorTest, EveryCaseOfTheSharedTable) {
  const nlohmann::json table = SharedTable();
  const std::map<std::string, Rpc> rpcs = Rpcs();
  ASSERT_FALSE(table["cases"].empty());
  for (const nlohmann::json& c : table["cases"]) {
    const std::string what = c.dump();
    const absl::StatusCode code = CodeNamed(c["code"]);
    ASSERT_NE(code, absl::StatusCode::kOk) << what;
    ASSERT_TRUE(rpcs.contains(c["rpc"])) << what;
    absl::Status status(code, c["message"].get<std::string>());
    if (c["accepted"].get<bool>()) status = MarkAccepted(status);
    const ErrorKind kind = ClassifyError(rpcs.at(c["rpc"]), status);
    EXPECT_EQ(ErrorKindName(kind), c["kind"].get<std::string>()) << what;
    EXPECT_EQ(ExitCodeFor(kind), c["exit_code"].get<int>()) << what;
    EXPECT_EQ(MayHaveBeenAccepted(rpcs.at(c["rpc"]), status),
              c.value("may_have_been_accepted", false))
        << what;
  }
}

// Before acceptance, by code, for a message that is no evidence: every code
// of every method has the kind the table's by_code says, or its by_flag
// where the method's registry row has that flag.
TEST(ClassifyErrorTest, EveryCodeOfEveryMethodAsTheSharedTableSays) {
  const nlohmann::json table = SharedTable();
  ASSERT_EQ(table["by_code"].size(), 16u) << "every code but OK, once";
  ASSERT_FALSE(table["by_flag"].empty());
  for (const nlohmann::json& row : table["by_code"]) {
    const absl::StatusCode code = CodeNamed(row["code"]);
    ASSERT_NE(code, absl::StatusCode::kOk) << row.dump();
    for (const RpcInfo& info : kRpcs) {
      std::string want = row["kind"];
      for (const nlohmann::json& flag : table["by_flag"]) {
        if (flag["code"] == row["code"] && FlagOf(info, flag["flag"])) {
          want = flag["kind"];
        }
      }
      EXPECT_EQ(ErrorKindName(ClassifyError(info.rpc, absl::Status(code, "x"))),
                want)
          << row["code"] << " on " << info.name;
    }
  }
}

// Every kind once in the table's kinds, with its exit code: the Python
// client's classes are checked against the same rows.
TEST(ClassifyErrorTest, TheSharedTableHasEveryKindWithItsExitCode) {
  const nlohmann::json table = SharedTable();
  std::map<std::string, int> exit_codes;
  for (const nlohmann::json& row : table["kinds"]) {
    EXPECT_TRUE(exit_codes.emplace(row["kind"], row["exit_code"]).second)
        << "twice: " << row.dump();
  }
  EXPECT_EQ(exit_codes.size(), AllErrorKinds().size());
  for (const ErrorKind kind : AllErrorKinds()) {
    const std::string name(ErrorKindName(kind));
    ASSERT_TRUE(exit_codes.contains(name)) << name;
    EXPECT_EQ(exit_codes.at(name), ExitCodeFor(kind)) << name;
  }
}

TEST(ClassifyErrorTest, UnimplementedIdleIsIdleUnavailable) {
  EXPECT_EQ(ClassifyError(Rpc::kIdle, absl::UnimplementedError("")),
            ErrorKind::kIdleUnavailable);
  EXPECT_EQ(ClassifyError(Rpc::kStop, absl::UnimplementedError("")),
            ErrorKind::kRpcError)
      << "only a missing Idle is a capability signal";
}

// After acceptance every failure of a Dispatch says the job started: never
// transient, never "rpc error".
TEST(ClassifyErrorTest, EveryCodeAfterAcceptanceSaysTheJobStarted) {
  using C = absl::StatusCode;
  for (int i = 1; i <= 16; ++i) {
    const auto code = static_cast<C>(i);
    for (const char* message : {"x", "Socket closed", "Cancelling all calls",
                                "Ssl handshake failed"}) {
      const absl::Status status = MarkAccepted(absl::Status(code, message));
      ASSERT_TRUE(Accepted(status));
      const ErrorKind kind = ClassifyError(Rpc::kDispatch, status);
      // ABORTED is a take-over: the job runs on, under another call.
      EXPECT_EQ(kind, code == C::kDeadlineExceeded
                          ? ErrorKind::kAcceptedDeadlineExceeded
                      : code == C::kAborted ? ErrorKind::kTakenOver
                                            : ErrorKind::kOutcomeUnknown)
          << absl::StatusCodeToString(code) << ": " << message;
      EXPECT_FALSE(IsTransient(kind));
      EXPECT_NE(ExitCodeFor(kind), 75) << "an accepted job is never 'retry'";
    }
  }
  EXPECT_FALSE(Accepted(MarkAccepted(absl::OkStatus())));
}

// Retrying may work exactly where the exit code says so (75, EX_TEMPFAIL):
// never for a job that may have started.
TEST(ClassifyErrorTest, TransientKindsAreThoseOfExitCode75) {
  for (const ErrorKind kind : AllErrorKinds()) {
    EXPECT_EQ(IsTransient(kind), ExitCodeFor(kind) == 75)
        << ErrorKindName(kind);
  }
  EXPECT_FALSE(IsTransient(ErrorKind::kMaybeStarted));
}

}  // namespace
}  // namespace cfdb::worker

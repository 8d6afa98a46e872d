#include "cfdb/worker/errors.h"

#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cfdb::worker {
namespace {

// The case table both clients are checked against (tests/data).
TEST(ClassifyErrorTest, EveryCaseOfTheSharedTable) {
  std::ifstream file(CFDB_ERROR_CASES);
  ASSERT_TRUE(file) << CFDB_ERROR_CASES;
  const nlohmann::json table = nlohmann::json::parse(file);
  const std::map<std::string, Rpc> rpcs = {
      {"Idle", Rpc::kIdle},         {"Stop", Rpc::kStop},
      {"Dispatch", Rpc::kDispatch}, {"Health", Rpc::kHealth},
      {"Attach", Rpc::kAttach},     {"ListJobs", Rpc::kListJobs},
      {"Cancel", Rpc::kCancel}};
  ASSERT_FALSE(table["cases"].empty());
  for (const nlohmann::json& c : table["cases"]) {
    const std::string what = c.dump();
    absl::StatusCode code = absl::StatusCode::kOk;
    for (int i = 1; i <= 16; ++i) {
      if (absl::StatusCodeToString(static_cast<absl::StatusCode>(i)) ==
          c["code"].get<std::string>()) {
        code = static_cast<absl::StatusCode>(i);
      }
    }
    ASSERT_NE(code, absl::StatusCode::kOk) << what;
    ASSERT_TRUE(rpcs.contains(c["rpc"])) << what;
    absl::Status status(code, c["message"].get<std::string>());
    if (c["accepted"].get<bool>()) status = MarkAccepted(status);
    const ErrorKind kind = ClassifyError(rpcs.at(c["rpc"]), status);
    EXPECT_EQ(ErrorKindName(kind), c["kind"].get<std::string>()) << what;
    EXPECT_EQ(ExitCodeFor(kind), c["exit_code"].get<int>()) << what;
  }
}

TEST(ClassifyErrorTest, UnimplementedIdleIsIdleUnavailable) {
  EXPECT_EQ(ClassifyError(Rpc::kIdle, absl::UnimplementedError("")),
            ErrorKind::kIdleUnavailable);
  EXPECT_EQ(ClassifyError(Rpc::kStop, absl::UnimplementedError("")),
            ErrorKind::kRpcError)
      << "only a missing Idle is a capability signal";
}

// Before acceptance, by code, for a message without evidence: every code
// has its kind.
TEST(ClassifyErrorTest, EveryCodeBeforeAcceptanceHasItsKind) {
  using C = absl::StatusCode;
  for (const Rpc rpc : {Rpc::kIdle, Rpc::kStop, Rpc::kDispatch, Rpc::kHealth,
                        Rpc::kAttach, Rpc::kListJobs, Rpc::kCancel}) {
    for (int i = 1; i <= 16; ++i) {
      const auto code = static_cast<C>(i);
      const ErrorKind kind = ClassifyError(rpc, absl::Status(code, "x"));
      ErrorKind want = ErrorKind::kRpcError;
      switch (code) {
        case C::kUnimplemented:
          want = rpc == Rpc::kIdle ? ErrorKind::kIdleUnavailable
                                   : ErrorKind::kRpcError;
          break;
        case C::kUnauthenticated:
          want = ErrorKind::kHandshakeError;
          break;
        case C::kPermissionDenied:
          want = ErrorKind::kPermissionDenied;
          break;
        case C::kAlreadyExists:
          want = ErrorKind::kAlreadyExists;
          break;
        case C::kNotFound:
          want = rpc == Rpc::kAttach || rpc == Rpc::kCancel
                     ? ErrorKind::kNotFound
                     : ErrorKind::kRpcError;
          break;
        case C::kFailedPrecondition:
          want =
              rpc == Rpc::kStop ? ErrorKind::kStillBusy : ErrorKind::kRpcError;
          break;
        case C::kDeadlineExceeded:
          want = rpc == Rpc::kDispatch ? ErrorKind::kMaybeStarted
                                       : ErrorKind::kTransient;
          break;
        case C::kUnavailable:
        case C::kResourceExhausted:
        case C::kCancelled:
          want = ErrorKind::kTransient;
          break;
        default:
          break;
      }
      EXPECT_EQ(kind, want)
          << absl::StatusCodeToString(code) << " rpc " << static_cast<int>(rpc);
    }
  }
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
      EXPECT_EQ(kind, code == C::kDeadlineExceeded
                          ? ErrorKind::kAcceptedDeadlineExceeded
                          : ErrorKind::kOutcomeUnknown)
          << absl::StatusCodeToString(code) << ": " << message;
      EXPECT_FALSE(IsTransient(kind));
      EXPECT_NE(ExitCodeFor(kind), 75) << "an accepted job is never 'retry'";
    }
  }
  EXPECT_FALSE(Accepted(MarkAccepted(absl::OkStatus())));
}

struct Case {
  Rpc rpc;
  absl::StatusCode code;
  const char* message;
  ErrorKind kind;
};

// Cause, not code: what each failure seen from a real worker means.
TEST(ClassifyErrorTest, TheCauseDecidesNotTheCode) {
  using C = absl::StatusCode;
  const Case cases[] = {
      // The worker is stopping or gone: not started, retry elsewhere.
      {Rpc::kDispatch, C::kUnavailable, "worker is stopping",
       ErrorKind::kTransient},
      {Rpc::kDispatch, C::kCancelled, "Cancelled", ErrorKind::kTransient},
      {Rpc::kIdle, C::kCancelled, "Cancelled", ErrorKind::kTransient},
      {Rpc::kStop, C::kCancelled, "Cancelled", ErrorKind::kTransient},
      {Rpc::kHealth, C::kUnavailable, "Cancelling all calls",
       ErrorKind::kTransient},
      {Rpc::kIdle, C::kUnavailable, "Socket closed", ErrorKind::kTransient},
      {Rpc::kDispatch, C::kUnknown, "Stream removed", ErrorKind::kTransient},
      {Rpc::kDispatch, C::kInternal, "Broken pipe", ErrorKind::kTransient},
      {Rpc::kDispatch, C::kResourceExhausted,
       "docket full: max_concurrent_tasks jobs are in flight",
       ErrorKind::kTransient},
      // Deterministic, whatever the code.
      {Rpc::kDispatch, C::kResourceExhausted,
       "Received message larger than max (70000123 vs. 67108864)",
       ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kResourceExhausted,
       "Sent message larger than max (70000123 vs. 67108864)",
       ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kResourceExhausted,
       "received initial metadata size exceeds limit", ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kInvalidArgument,
       "the request is 70000123 bytes, more than the limit of 67108864 bytes",
       ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kUnknown, "handler threw", ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kInternal, "bad state", ErrorKind::kRpcError},
      {Rpc::kStop, C::kPermissionDenied, "Stop: permission denied for identity",
       ErrorKind::kPermissionDenied},
      {Rpc::kDispatch, C::kUnimplemented, "", ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kUnavailable,
       "Received message larger than max (5007 vs. 1000)",
       ErrorKind::kRpcError},
      {Rpc::kDispatch, C::kDeadlineExceeded, "Deadline Exceeded",
       ErrorKind::kMaybeStarted},
      {Rpc::kIdle, C::kDeadlineExceeded, "Deadline Exceeded",
       ErrorKind::kTransient},
      {Rpc::kIdle, C::kUnimplemented, "", ErrorKind::kIdleUnavailable},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClassifyError(c.rpc, absl::Status(c.code, c.message)), c.kind)
        << absl::StatusCodeToString(c.code) << ": " << c.message;
  }
}

TEST(ClassifyErrorTest, UnavailableWithTlsEvidenceIsAHandshakeError) {
  for (const char* message :
       {"Ssl handshake failed: SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED",
        "TLS alert", "peer certificate expired",
        "Custom verification check failed with error: UNAUTHENTICATED: "
        "Hostname Verification Check failed."}) {
    const ErrorKind kind =
        ClassifyError(Rpc::kIdle, absl::UnavailableError(message));
    EXPECT_EQ(kind, ErrorKind::kHandshakeError) << message;
    EXPECT_TRUE(IsTransient(kind));
  }
  EXPECT_EQ(
      ClassifyError(Rpc::kIdle, absl::UnavailableError("Connection refused")),
      ErrorKind::kTransient);
}

TEST(ClassifyErrorTest, ExitCodesAreDistinct) {
  EXPECT_EQ(ExitCodeFor(ErrorKind::kIdleUnavailable), 69);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kTransient), 75);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kHandshakeError), 75);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kRpcError), 76);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kPermissionDenied), 77);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kOutcomeUnknown), 74);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kAcceptedDeadlineExceeded), 73);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kMaybeStarted), 74);
  EXPECT_FALSE(IsTransient(ErrorKind::kMaybeStarted));
}

}  // namespace
}  // namespace cfdb::worker

#include "cfdb/worker/errors.h"

#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

TEST(ClassifyErrorTest, UnimplementedIdleIsIdleUnavailable) {
  EXPECT_EQ(ClassifyError(Rpc::kIdle, absl::UnimplementedError("")),
            ErrorKind::kIdleUnavailable);
  EXPECT_EQ(ClassifyError(Rpc::kStop, absl::UnimplementedError("")),
            ErrorKind::kRpcError)
      << "only a missing Idle is a capability signal";
}

TEST(ClassifyErrorTest, EveryCodeHasItsKind) {
  using C = absl::StatusCode;
  for (int i = 1; i <= 16; ++i) {
    const auto code = static_cast<C>(i);
    const ErrorKind kind = ClassifyError(Rpc::kIdle, absl::Status(code, "x"));
    switch (code) {
      case C::kUnimplemented:
        EXPECT_EQ(kind, ErrorKind::kIdleUnavailable);
        break;
      case C::kUnauthenticated:
        EXPECT_EQ(kind, ErrorKind::kHandshakeError);
        break;
      case C::kUnavailable:
      case C::kDeadlineExceeded:
      case C::kResourceExhausted:
        EXPECT_EQ(kind, ErrorKind::kTransient) << absl::StatusCodeToString(code);
        break;
      default:
        EXPECT_EQ(kind, ErrorKind::kRpcError) << absl::StatusCodeToString(code);
    }
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
  EXPECT_EQ(ClassifyError(Rpc::kIdle,
                          absl::UnavailableError("Connection refused")),
            ErrorKind::kTransient);
}

TEST(ClassifyErrorTest, ExitCodesAreDistinct) {
  EXPECT_EQ(ExitCodeFor(ErrorKind::kIdleUnavailable), 69);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kTransient), 75);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kRpcError), 76);
}

}  // namespace
}  // namespace cfdb::worker

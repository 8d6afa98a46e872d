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

TEST(ClassifyErrorTest, ExitCodesAreDistinct) {
  EXPECT_EQ(ExitCodeFor(ErrorKind::kIdleUnavailable), 69);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kTransient), 75);
  EXPECT_EQ(ExitCodeFor(ErrorKind::kRpcError), 76);
}

}  // namespace
}  // namespace cfdb::worker

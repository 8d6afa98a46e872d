#include "rpc/unknown_methods.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"

namespace cfdb::worker {

std::string UnimplementedMessage(std::string_view method, bool wool_compat) {
  // The method is the client's text: escaped and bounded, as any echo.
  const std::string named = EscapedForLog(method);
  if (absl::StartsWith(std::string(method),
                       "/wool.runtime.protobuf.wire.Worker/")) {
    return wool_compat ? absl::StrCat(
                             "cfdb-worker serves only Wool's idle and stop, "
                             "not ",
                             named)
                       : absl::StrCat(
                             "cfdb-worker serves only Wool's idle and stop, "
                             "and only with --wool-compat (called: ",
                             named, ")");
  }
  return absl::StrCat(
      "cfdb-worker does not serve ", named,
      ": it serves cfdb.worker.v1.Worker (Dispatch, DispatchStream, Idle, "
      "Stop) and grpc.health.v1.Health (Check, Watch)",
      wool_compat ? ", and Wool's idle and stop" : "");
}

grpc::ServerGenericBidiReactor* UnknownMethods::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  class Unimplemented final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Unimplemented(const std::string& message) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message));
    }
    void OnDone() override { delete this; }
  };
  return new Unimplemented(
      UnimplementedMessage(context->method(), wool_compat_));
}

}  // namespace cfdb::worker

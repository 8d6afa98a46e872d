// Every method no service of the server serves: UNIMPLEMENTED with one line
// saying what is served, instead of gRPC's empty message (which a client
// such as Wool's shows as gRPC's debug string, peer and timestamp).
#pragma once

#include <string>
#include <string_view>

#include "grpcpp/generic/async_generic_service.h"

namespace cfdb::worker {

// UnimplementedMessage returns the message of a call to `method`
// ("/package.Service/Method", as a client sent it) that no service here
// serves, e.g. "cfdb-worker serves only Wool's idle and stop, not
// /wool.runtime.protobuf.wire.Worker/dispatch" (one line, the method
// escaped and bounded as any client text). `wool_compat`: whether Wool's
// idle and stop are served.
std::string UnimplementedMessage(std::string_view method, bool wool_compat);

// UnknownMethods answers every call it gets with UNIMPLEMENTED and
// UnimplementedMessage at once, reading nothing. gRPC hands it only the
// methods no registered service has, so the served ones (Idle included:
// UNIMPLEMENTED on Idle means "a worker that predates it", errors.h) are
// untouched. Thread-safe.
class UnknownMethods final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethods(bool wool_compat) : wool_compat_(wool_compat) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  const bool wool_compat_;
};

}  // namespace cfdb::worker

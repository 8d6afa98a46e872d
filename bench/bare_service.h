// BareService: the floor the worker is measured against. The same wire
// contract (cfdb.worker.v1.Worker, built from the same proto) served by a
// callback service that does nothing: Idle answers a constant and Dispatch
// writes the two events a no-op job produces (accepted, exit 0) without a
// docket, a job thread or a log line.
#pragma once

#include <memory>
#include <string>

#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker::bench {

namespace v1 = ::cfdb::worker::v1;

class BareService final : public v1::Worker::CallbackService {
 public:
  grpc::ServerUnaryReactor* Idle(grpc::CallbackServerContext* ctx,
                                 const v1::IdleRequest*,
                                 v1::IdleTime* reply) override {
    reply->set_seconds(0);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::DispatchEvent>* Dispatch(
      grpc::CallbackServerContext*, const v1::DispatchRequest*) override {
    return new TwoEvents;
  }

 private:
  // TwoEvents writes `accepted` then `exit {code: 0}`, then finishes.
  class TwoEvents final : public grpc::ServerWriteReactor<v1::DispatchEvent> {
   public:
    TwoEvents() {
      accepted_.mutable_accepted();
      exit_.mutable_exit()->set_code(0);
      StartWrite(&accepted_);
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      } else if (!exit_sent_) {
        exit_sent_ = true;
        StartWrite(&exit_);
      } else {
        Finish(grpc::Status::OK);
      }
    }
    void OnDone() override { delete this; }

   private:
    v1::DispatchEvent accepted_;
    v1::DispatchEvent exit_;
    bool exit_sent_ = false;
  };
};

// StartBareServer serves `service` on `address` (port 0 picks one, written
// to `*port`). Null when the address cannot be bound. `service` must outlive
// the server.
inline std::unique_ptr<grpc::Server> StartBareServer(BareService& service,
                                                     const std::string& address,
                                                     int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.RegisterService(&service);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) return nullptr;
  return server;
}

}  // namespace cfdb::worker::bench

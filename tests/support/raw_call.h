// CallRaw: a call of any method by name, with any bytes as its request, as
// a client of another stack (or a hostile one) may make it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker::test_support {

// CallRaw sends `bytes` as the request of `method` ("/package.Service/
// Method") over a plaintext channel to `address` and returns the status.
inline grpc::Status CallRaw(const std::string& address,
                            const std::string& method,
                            const std::string& bytes) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status s) {
                   std::lock_guard lock(mu);
                   status = s;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

}  // namespace cfdb::worker::test_support

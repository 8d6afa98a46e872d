// StdinPump: the client's half of DispatchStream's input, a descriptor
// streamed into the call from a thread of its own (connection.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/status/status.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"

namespace cfdb::worker {

// StdinPump streams a descriptor into a DispatchStream call from a thread of
// its own, a chunk of what the descriptor has at once (up to
// kStdinChunkBytes), until the end of input (then half-closes), a read error
// (then cancels the call), the call's end or Stop. gRPC's flow control holds
// a Write until the worker has room, so the descriptor is read only as fast
// as the job takes its input.
//
// Thread-safety: Start, Stop and Join from the call's thread (Stop from any
// thread); error() after Join. It borrows the descriptor, the stream and the
// context, which must outlive it; the destructor stops and joins.
class StdinPump {
 public:
  using Stream = grpc::ClientReaderWriter<v1::DispatchInput, v1::DispatchEvent>;

  StdinPump(int fd, Stream& stream, grpc::ClientContext& context);
  ~StdinPump();
  StdinPump(const StdinPump&) = delete;
  StdinPump& operator=(const StdinPump&) = delete;

  // Start starts the thread, once; later calls do nothing.
  void Start();
  // Stop makes the pump stop reading; returns at once.
  void Stop();
  // Join waits for the thread, if it was started.
  void Join();
  // error is the read error that ended the input (INTERNAL), if any; after
  // Join.
  const absl::Status& error() const { return error_; }

 private:
  void Run();
  // Fill reads what the descriptor has at once, up to a chunk: a fast
  // producer's input goes in few large messages, a trickle's at once.
  // Sets `end` at the end of input; a read error fails the pump.
  size_t Fill(char* buffer, bool& end);
  void Fail(const std::string& message);

  const int fd_;
  Stream& stream_;
  grpc::ClientContext& context_;
  const int wake_;  // an eventfd: readable once stopped
  absl::Status error_;
  std::thread thread_;
};

}  // namespace cfdb::worker

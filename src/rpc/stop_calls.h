// Stop calls: every one waits for the worker's one drain and gets its
// summary, holding no thread meanwhile.
#pragma once

#include <memory>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rpc/calls.h"

namespace cfdb::worker {

class StopReactor;

// StopCalls answers every Stop call when the worker's one drain ends. A call
// waiting for it holds no thread, only its entry in `waiting_`. Thread-safe.
class StopCalls {
 public:
  // Add answers `reactor` when the drain ends, or at once if it has.
  void Add(StopReactor* reactor);
  // Cancel finishes `reactor` with CANCELLED if it is still waiting (its
  // client's deadline passed, or the client went away).
  void Cancel(StopReactor* reactor);
  // Drained answers every waiting call with `summary`, and later ones at
  // once.
  void Drained(const StopSummary& summary);

 private:
  absl::Mutex mu_;
  std::optional<StopSummary> summary_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<StopReactor*> waiting_ ABSL_GUARDED_BY(mu_);
};

// StopReplyWriter writes the reply of a Stop call (of whichever service)
// for the drain's summary.
using StopReplyWriter = void (*)(const StopSummary& summary,
                                 grpc::ByteBuffer* reply);

// WriteStopReply writes cfdb.worker.v1.StopReply.
inline void WriteStopReply(const StopSummary& summary,
                           grpc::ByteBuffer* bytes) {
  v1::StopReply reply;
  reply.set_drained(static_cast<uint32_t>(summary.drained));
  reply.set_cancelled(static_cast<uint32_t>(summary.cancelled));
  Serialize(reply, bytes);
}

// StopReactor is one Stop call: answered with the drain's summary.
class StopReactor final : public grpc::ServerUnaryReactor {
 public:
  StopReactor(CallTracker& calls, std::shared_ptr<StopCalls> stops,
              grpc::ByteBuffer* reply, StopReplyWriter write)
      : calls_(calls), stops_(std::move(stops)), reply_(reply), write_(write) {
    calls_.Started();
  }
  void Answer(const StopSummary& summary) {
    write_(summary, reply_);
    Finish(grpc::Status::OK);
  }
  void OnCancel() override { stops_->Cancel(this); }
  void OnDone() override {
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
  const std::shared_ptr<StopCalls> stops_;
  grpc::ByteBuffer* const reply_;
  const StopReplyWriter write_;
};

}  // namespace cfdb::worker

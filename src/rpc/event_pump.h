// EventPump: one call's side of a job. It reads the job's journal (the
// call is the journal's reader) and writes the events to the call, one
// write at a time, then finishes the call exactly once. Calls that carry a
// job's events (Dispatch, DispatchStream, Attach) each have one.
#pragma once

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/job_journal.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker {

// CallSide is what an EventPump needs of its call's reactor. Reactions of
// gRPC may run inline, so the pump calls these without holding its lock.
class CallSide {
 public:
  virtual void WriteEvent(const grpc::ByteBuffer* bytes) = 0;
  virtual void FinishCall(const grpc::Status& status) = 0;
  // ReadInput starts reading the next message (DispatchStream only).
  virtual void ReadInput(grpc::ByteBuffer* into) = 0;

 protected:
  ~CallSide() = default;
};

// EventPump writes a job's events to one call: first its own events (e.g.
// `accepted`, `input_closed`), as they come, then the journal's output and
// terminal event. It outlives the reactor when the job holds it; its
// `reactor_` is null from then on. Always held by a shared_ptr.
// Thread-safe.
class EventPump final : public JobReader,
                        public std::enable_shared_from_this<EventPump> {
 public:
  explicit EventPump(CallSide* reactor) : reactor_(reactor) {}

  // Send queues `event` ahead of the journal's next event.
  void Send(grpc::ByteBuffer event);
  // Read starts reading `job`'s journal (attached as its reader before):
  // its events are written after those Sent.
  void Read(std::shared_ptr<Job> job);
  // Fail finishes the call with `status` once the write in flight is done,
  // writing nothing more.
  void Fail(const absl::Status& status);

  // StartRead starts reading the next message of the call into `into`
  // (DispatchStream's stdin); false, with nothing started, once the call is
  // finishing or gone.
  bool StartRead(grpc::ByteBuffer* into);

  // The reactor's reactions.
  void WriteDone(bool ok);
  void ClientCancelled();
  void ReactorDone();

  // JobReader.
  void Wake() override { Kick(); }

 private:
  // Kick starts the next write or finishes the call; call without mu_.
  void Kick();
  // Leave tells the job its reader left (detach grace), once.
  void Leave();

  absl::Mutex mu_;
  CallSide* reactor_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Job> job_ ABSL_GUARDED_BY(mu_);  // once Read
  std::deque<grpc::ByteBuffer> sends_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer writing_;  // the event of the write in flight
  bool in_write_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_outcome_ ABSL_GUARDED_BY(mu_) = false;
  bool outcome_written_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  // One thread at a time pumps (Kick); another's Kick meanwhile makes it go
  // round once more.
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  bool kick_again_ ABSL_GUARDED_BY(mu_) = false;
  // Reads being started outside the lock (StartRead): Finish waits for 0.
  int starting_reads_ ABSL_GUARDED_BY(mu_) = 0;
  // Not OK once the call must end without more events: the client went
  // away or a write failed (CANCELLED), another call took the job over
  // (ABORTED), or the worker refused or the client broke the protocol.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cfdb::worker

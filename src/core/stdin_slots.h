// StdinSlots: a streamed job's input between the call that reads it and the
// job that takes it (rpc/dispatch_call.cc's StreamJob is the call's side).
#pragma once

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/job.h"

namespace cfdb::worker {

// StdinSlots holds the chunks of a job's streamed stdin that arrived and the
// job has not taken: at most two, so that the next read starts as soon as a
// chunk arrives, not once the job took it (the job need not wait a round
// trip for each chunk), and the input costs the worker a known amount. It
// decides when the reader may read again, and keeps a descriptor readable
// while Take would not return kNotYet, for a job that waits in poll(2).
//
// The reader (one read in flight at a time) and the job call it from their
// own threads. Thread-safe. Owns its eventfd.
class StdinSlots {
 public:
  using Result = JobContext::StdinResult;

  // `streamed` false: the job's stdin is all in its request, nothing is
  // read, fd() is -1 and Take returns kEnd.
  explicit StdinSlots(bool streamed);
  ~StdinSlots();
  StdinSlots(const StdinSlots&) = delete;
  StdinSlots& operator=(const StdinSlots&) = delete;

  // streamed is the constructor's `streamed`.
  bool streamed() const { return streamed_; }

  // fd is an eventfd, readable while Take would not return kNotYet; -1
  // without streamed stdin, and once Release closed it.
  int fd() const { return fd_.load(); }

  // The reader's side.
  //
  // BeginRead claims the next read: false while one is in flight, both
  // slots are full, the input ended or was cut short.
  bool BeginRead();

  // Arrived is what a read claimed by BeginRead brought.
  enum class Arrived {
    kChunk,    // a chunk of stdin
    kEnd,      // the end of input
    kClosed,   // nothing: the client half-closed, or the call ended
    kInvalid,  // a message that must not come (the reader says why)
  };
  // Next is what the reader does after Put.
  enum class Next {
    kRead,      // read again (ReadNext: BeginRead decides)
    kStop,      // no more reads
    kCutShort,  // the input did not end as it must: end the call and
                // cancel the job (then MarkCutShort)
  };
  // Put ends the read in flight with what it brought: a chunk is swapped
  // out of `chunk` into a free slot, or discarded once the job takes no more
  // input (Close) or `job_ended`.
  Next Put(Arrived what, std::string& chunk, bool job_ended);

  // MarkCutShort stops all reading: the input was cut short.
  void MarkCutShort();

  // The job's side.
  //
  // Take swaps the oldest waiting chunk into `chunk`: kChunk (the reader
  // may then read again), kEnd once the input ended and every chunk was
  // taken, kNotYet while none waits.
  Result Take(std::string& chunk);

  // Close says the job takes no more input; the waiting chunks go. Returns
  // true, once, when more could have come, so the client should hear so.
  bool Close();

  // Release closes fd(): the job ended, and a retained result holds no
  // descriptor.
  void Release();

 private:
  // SetReady makes fd() readable (true) or not (false).
  void SetReady(bool ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool streamed_;
  std::atomic<int> fd_;  // written under mu_
  absl::Mutex mu_;
  // Chunks waiting for the job, in order: the first `waiting_` slots.
  std::string slots_[2] ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_read_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_);           // no more will come
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the job took its last
  bool cut_short_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cfdb::worker

// JobJournal: a job's output and end, kept apart from whoever reads them, so
// that a job is a handle rather than a connection: it can outlive the call
// that started it, and a later call can read it again from a byte offset.
//
// The job appends output chunks (each with its stream and byte offset in
// that stream) and, once, its outcome. Readers, clients' calls, read them in
// order, each from a cursor of its own: the chunks, then the outcome. Any
// number of readers may follow a journal; at most one of them, the
// controller (the dispatching call, or one that took it over), steers it:
// the job's flow control follows the controller's cursor, and its leaving
// is what starts the job's detach grace. A follower only reads, and none
// disturbs another.
//
//   JobJournal journal({.outbox_bytes = kOutboxBytes, .buffer_bytes = 4 <<
//   20}); journal.Attach(reader, {0, 0}, JobJournal::Role::kControl);
//   journal.Append(OutputStream::kStdout, "hi\n", deadline);   // job thread
//   JobJournal::Chunk chunk;
//   JobOutcome outcome;
//   while (journal.Next(reader, chunk, outcome) == JobJournal::Read::kChunk)
//
// Memory is bounded. Output not yet read by the controller is held back by
// flow control: Append blocks while more than `outbox_bytes` wait for an
// attached controller, or `buffer_bytes` with none (so a job nobody steers
// is paused, never made to lose output), unless the job asked for
// drop-oldest, which drops the oldest unread chunk instead and counts it.
// Output already read stays too, up to `buffer_bytes` in all, so that a
// reader whose connection broke can come back from the offset it got to;
// past that, the oldest goes. With no controller, the reader furthest ahead
// makes room as it reads. A follower never holds output back: one that
// falls behind the buffer skips what went, and is told (Chunk::lost).

#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/limits.h"

namespace cfdb::worker {

// JobReader is whoever reads a journal: a client's call. The journal holds
// it weakly, so a reader may go whenever it likes (after Leave).
class JobReader {
 public:
  virtual ~JobReader() = default;
  // Wake says that Read may have something new: an event, or that another
  // reader took over. Called without the journal's lock, on any thread
  // (the job's, another reader's); must not block.
  virtual void Wake() = 0;
};

// Offsets are byte offsets into a job's stdout and stderr.
struct StreamOffsets {
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;

  uint64_t& of(OutputStream s) {
    return s == OutputStream::kStdout ? stdout_bytes : stderr_bytes;
  }
  uint64_t of(OutputStream s) const {
    return s == OutputStream::kStdout ? stdout_bytes : stderr_bytes;
  }
};

// JobJournal is one job's output and outcome. Thread-safe.
class JobJournal {
 public:
  struct Limits {
    // Unread output an attached reader may have waiting before Append
    // blocks (the outbox of a slow client).
    std::size_t outbox_bytes = kOutboxBytes;
    // All output kept: unread output while nobody reads, and output already
    // read, for a reader that comes back. At least outbox_bytes.
    std::size_t buffer_bytes = std::size_t{4} << 20;
    // When the buffer is full and nobody reads fast enough, drop the oldest
    // unread chunk (counted) rather than pause the job.
    bool drop_oldest = false;
  };

  // Chunk is a piece of output: `size` bytes at `begin` of a shared buffer,
  // the bytes `offset`.. of `stream`. Holding one keeps its buffer alive.
  struct Chunk {
    OutputStream stream = OutputStream::kStdout;
    uint64_t offset = 0;
    std::shared_ptr<const std::string> buffer;
    std::size_t begin = 0;
    std::size_t size = 0;

    // Bytes of `stream` before `offset` that this reader will not get, since
    // its last chunk of that stream (or its attachment): gone past the
    // buffer while it fell behind, dropped, or discarded at a cancel.
    uint64_t lost = 0;
    std::string_view data() const {
      return std::string_view(*buffer).substr(begin, size);
    }
  };

  // Attachment is what a reader finds when it attaches.
  struct Attachment {
    // Where its output resumes: the offsets asked for, or later where the
    // bytes from there were lost.
    StreamOffsets from;
    // Bytes at or after the offsets asked for that it will not get: gone
    // past the buffer, dropped (drop-oldest) or discarded at a cancel.
    StreamOffsets lost;
    bool ended = false;  // the job has its outcome already
    // The reader is the controller (a follower otherwise: always for an
    // ended job, which there is nothing left to steer of).
    bool controls = false;
  };

  // Role is what a reader asks to be when it attaches.
  enum class Role {
    kFollow,   // read only
    kControl,  // steer: flow control and the detach grace follow it
  };

  // Left is what a reader's leaving changed (Leave).
  struct Left {
    bool controller = false;  // it was the controller
    // No reader is left and the job has not ended: it runs unattended.
    bool unattended = false;
  };

  // What Read found.
  enum class Read {
    kChunk,      // `chunk` is the next output
    kOutcome,    // `outcome` is the end: nothing follows
    kNothing,    // nothing yet: Wake comes when there is
    kTakenOver,  // another reader took control: this one is done
  };

  // Stats describe the journal for listings (Worker::ListJobs).
  struct Stats {
    uint64_t retained_bytes = 0;  // output held now, read or not
    StreamOffsets written;        // bytes the job wrote, per stream
    StreamOffsets dropped;        // dropped by drop-oldest or a cancel
    bool attached = false;        // a reader is attached
    uint32_t readers = 0;         // readers attached, controller included
    bool ended = false;           // the outcome is in
    bool claimed = false;         // a reader was given the outcome
  };

  explicit JobJournal(Limits limits) : limits_(limits) {}
  JobJournal(const JobJournal&) = delete;
  JobJournal& operator=(const JobJournal&) = delete;

  // Append adds `data` (taken, not copied) as the next output of `stream`,
  // in chunks of at most kMaxChunkBytes sharing its buffer. It waits while
  // flow control holds output back, never past `deadline`. kDropped once
  // the job is cancelled or ended (nothing is kept), kTimedOut when the
  // deadline passed first (nothing is kept: call again).
  JobContext::EmitResult Append(OutputStream stream, std::string data,
                                TimePoint deadline);

  // End records the outcome (the first call only) and wakes the readers.
  void End(JobOutcome outcome);

  // Cancelled discards the unread output, so the outcome is read next
  // (whoever reads slowly still learns at once how the job ended), and
  // wakes Append.
  void Cancelled();

  // Attach adds `reader`, reading from `from`: the offsets asked for, or
  // later where the bytes from there are not kept any more (an offset past
  // what was written waits for those bytes). With kControl, on a job that
  // has not ended, it becomes the controller: a controller attached before
  // is woken, and its next Read returns kTakenOver. Attaching again as the
  // same reader moves its cursor.
  Attachment Attach(const std::shared_ptr<JobReader>& reader,
                    StreamOffsets from, Role role);

  // Next gives `reader` the next event and moves its cursor past it;
  // kTakenOver for a reader not attached (e.g. one whose control was taken
  // over). Call from one thread at a time per reader.
  Read Next(const JobReader* reader, Chunk& chunk, JobOutcome& outcome);

  // CountDropsInto adds every byte dropped from now on (Stats::dropped) to
  // `*total` too, e.g. the worker's count of all its jobs' (the metrics);
  // `total` must outlive the journal. Worker::Dispatch sets it.
  void CountDropsInto(std::atomic<uint64_t>* total);

  // Claimed says that a client was given the outcome (by a reader, or in a
  // Cancel call's answer): the result is read.
  void Claimed();

  // Leave detaches `reader` (its call ended) and says what that changed.
  Left Leave(const JobReader* reader);

  // Release lets go of every chunk kept (an ended job's result over its
  // budget keeps its outcome only); unread bytes count as dropped.
  void Release();

  Stats stats() const;
  bool attached() const;

  // The largest chunk Append makes (and so one Output message's data).
  static constexpr std::size_t kMaxChunkBytes = kOutputChunkBytes;

 private:
  struct Entry {
    Chunk chunk;
    uint64_t seq;  // position in the journal, counting every chunk
  };
  // Cursor is where a reader is: entries before `seq` were read, and of the
  // rest, bytes of each stream before `from` are skipped.
  struct Cursor {
    uint64_t seq = 0;
    StreamOffsets from;
  };
  struct Follower {
    std::weak_ptr<JobReader> reader;
    Cursor cursor;
  };

  // limit is how much unread output Append lets wait.
  std::size_t limit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Advance moves `cursor` past the next entry it has not read into
  // `chunk`; false when there is none. `room` is set when the entries
  // passed were unread ones: the controller's, or with no controller, the
  // ones no reader had read.
  bool Advance(Cursor& cursor, bool controls, Chunk& chunk, bool& room)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Readers returns every reader attached, to wake.
  std::vector<std::shared_ptr<JobReader>> Readers() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evict drops entries from the front: read ones while the journal holds
  // more than buffer_bytes; with drop-oldest, unread ones too.
  void Evict(std::size_t incoming) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropFront(bool unread) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t retained_ ABSL_GUARDED_BY(mu_) = 0;  // bytes in entries_
  // The controller's cursor (or the last one's, once it left): what flow
  // control and eviction count as read.
  Cursor cursor_ ABSL_GUARDED_BY(mu_);
  std::size_t unread_ ABSL_GUARDED_BY(mu_) = 0;  // bytes at seq >= cursor
  StreamOffsets written_ ABSL_GUARDED_BY(mu_);
  StreamOffsets dropped_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t>* dropped_total_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Drop counts `bytes` of `stream` as dropped.
  void Drop(OutputStream stream, std::size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::weak_ptr<JobReader> controller_ ABSL_GUARDED_BY(mu_);
  const JobReader* controller_id_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<const JobReader*, Follower> followers_
      ABSL_GUARDED_BY(mu_);
  std::optional<JobOutcome> outcome_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool claimed_ ABSL_GUARDED_BY(mu_) = false;
  CondVar room_;  // signalled when Append may go on
};

}  // namespace cfdb::worker

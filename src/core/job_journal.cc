#include "cfdb/worker/job_journal.h"

#include <algorithm>

namespace cfdb::worker {

std::size_t JobJournal::limit() const {
  return reader_id_ != nullptr
             ? limits_.outbox_bytes
             : std::max(limits_.buffer_bytes, limits_.outbox_bytes);
}

std::shared_ptr<JobReader> JobJournal::Reader() const {
  return reader_id_ != nullptr ? reader_.lock() : nullptr;
}

void JobJournal::DropFront(bool unread) {
  const Entry& front = entries_.front();
  retained_ -= front.chunk.size;
  if (unread) {
    unread_ -= front.chunk.size;
    dropped_.of(front.chunk.stream) += front.chunk.size;
    cursor_seq_ = front.seq + 1;
  }
  entries_.pop_front();
}

void JobJournal::Evict(std::size_t incoming) {
  const std::size_t buffer =
      std::max(limits_.buffer_bytes, limits_.outbox_bytes);
  while (!entries_.empty() && retained_ + incoming > buffer) {
    const bool unread = entries_.front().seq >= cursor_seq_;
    if (unread && !limits_.drop_oldest) return;
    DropFront(unread);
  }
}

JobContext::EmitResult JobJournal::Append(OutputStream stream, std::string data,
                                          TimePoint deadline) {
  using EmitResult = JobContext::EmitResult;
  if (data.empty()) return EmitResult::kSent;
  const auto buffer = std::make_shared<const std::string>(std::move(data));
  std::shared_ptr<JobReader> wake;
  {
    absl::MutexLock lock(&mu_);
    // With drop-oldest nothing waits: the oldest unread output goes instead.
    if (!limits_.drop_oldest &&
        !room_.AwaitUntil(
            mu_, deadline, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              return unread_ < limit() || cancelled_ || outcome_.has_value();
            })) {
      return EmitResult::kTimedOut;
    }
    if (cancelled_ || outcome_) return EmitResult::kDropped;
    Evict(buffer->size());
    for (std::size_t begin = 0; begin < buffer->size();
         begin += kMaxChunkBytes) {
      const std::size_t size = std::min(kMaxChunkBytes, buffer->size() - begin);
      entries_.push_back(
          {Chunk{stream, written_.of(stream), buffer, begin, size},
           next_seq_++});
      written_.of(stream) += size;
      retained_ += size;
      unread_ += size;
    }
    wake = Reader();
  }
  if (wake) wake->Wake();
  return EmitResult::kSent;
}

void JobJournal::End(JobOutcome outcome) {
  std::shared_ptr<JobReader> wake;
  {
    absl::MutexLock lock(&mu_);
    if (outcome_) return;
    outcome_ = std::move(outcome);
    wake = Reader();
  }
  room_.SignalAll();
  if (wake) wake->Wake();
}

void JobJournal::Cancelled() {
  std::shared_ptr<JobReader> wake;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    // Unread output goes, so the outcome is what a reader gets next.
    while (!entries_.empty() && entries_.back().seq >= cursor_seq_) {
      const Entry& back = entries_.back();
      retained_ -= back.chunk.size;
      unread_ -= back.chunk.size;
      dropped_.of(back.chunk.stream) += back.chunk.size;
      entries_.pop_back();
    }
    cursor_seq_ = next_seq_;
    wake = Reader();
  }
  room_.SignalAll();
  if (wake) wake->Wake();
}

JobJournal::Attachment JobJournal::Attach(
    const std::shared_ptr<JobReader>& reader, StreamOffsets from) {
  std::shared_ptr<JobReader> taken_over;
  Attachment attachment;
  {
    absl::MutexLock lock(&mu_);
    taken_over = Reader();
    reader_ = reader;
    reader_id_ = reader.get();
    // Read again from the oldest output kept; what is older than that, or
    // was dropped, is lost to this reader.
    StreamOffsets first = written_;  // the first byte kept, per stream
    for (const Entry& e : entries_) {
      uint64_t& f = first.of(e.chunk.stream);
      f = std::min(f, e.chunk.offset);
    }
    for (const OutputStream s :
         {OutputStream::kStdout, OutputStream::kStderr}) {
      const uint64_t asked = std::min(from.of(s), written_.of(s));
      attachment.from.of(s) = std::max(asked, first.of(s));
      attachment.lost.of(s) = attachment.from.of(s) - asked;
    }
    cursor_from_ = attachment.from;
    cursor_seq_ = entries_.empty() ? next_seq_ : entries_.front().seq;
    unread_ = retained_;
    attachment.ended = outcome_.has_value();
  }
  room_.SignalAll();
  if (taken_over && taken_over != reader) taken_over->Wake();
  return attachment;
}

JobJournal::Read JobJournal::Next(const JobReader* reader, Chunk& chunk,
                                  JobOutcome& outcome) {
  bool room = false;
  Read read = Read::kNothing;
  {
    absl::MutexLock lock(&mu_);
    if (reader != reader_id_) return Read::kTakenOver;
    for (const Entry& e : entries_) {
      if (e.seq < cursor_seq_) continue;
      cursor_seq_ = e.seq + 1;
      unread_ -= e.chunk.size;
      room = true;
      const uint64_t end = e.chunk.offset + e.chunk.size;
      uint64_t& from = cursor_from_.of(e.chunk.stream);
      if (end <= from) continue;  // read before: skipped
      chunk = e.chunk;
      const std::size_t skip = static_cast<std::size_t>(
          std::max(from, e.chunk.offset) - e.chunk.offset);
      chunk.offset += skip;
      chunk.begin += skip;
      chunk.size -= skip;
      from = end;
      read = Read::kChunk;
      break;
    }
    if (read == Read::kNothing && outcome_) {
      outcome = *outcome_;
      read = Read::kOutcome;
    }
  }
  if (room) room_.SignalAll();
  return read;
}

void JobJournal::Claimed(const JobReader* reader) {
  absl::MutexLock lock(&mu_);
  if (reader == reader_id_ && outcome_) claimed_ = true;
}

bool JobJournal::Leave(const JobReader* reader) {
  {
    absl::MutexLock lock(&mu_);
    if (reader != reader_id_) return false;
    reader_.reset();
    reader_id_ = nullptr;
    if (outcome_) return false;
  }
  room_.SignalAll();  // the limit is the buffer's now
  return true;
}

void JobJournal::Release() {
  absl::MutexLock lock(&mu_);
  while (!entries_.empty()) DropFront(entries_.front().seq >= cursor_seq_);
}

JobJournal::Stats JobJournal::stats() const {
  absl::MutexLock lock(&mu_);
  return Stats{.retained_bytes = retained_,
               .written = written_,
               .dropped = dropped_,
               .attached = reader_id_ != nullptr,
               .ended = outcome_.has_value(),
               .claimed = claimed_};
}

bool JobJournal::attached() const {
  absl::MutexLock lock(&mu_);
  return reader_id_ != nullptr;
}

}  // namespace cfdb::worker

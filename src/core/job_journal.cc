#include "cfdb/worker/job_journal.h"

#include <algorithm>

namespace cfdb::worker {

std::size_t JobJournal::limit() const {
  return controller_id_ != nullptr
             ? limits_.outbox_bytes
             : std::max(limits_.buffer_bytes, limits_.outbox_bytes);
}

std::vector<std::shared_ptr<JobReader>> JobJournal::Readers() const {
  std::vector<std::shared_ptr<JobReader>> readers;
  readers.reserve(followers_.size() + 1);
  if (controller_id_ != nullptr) {
    if (auto reader = controller_.lock()) readers.push_back(std::move(reader));
  }
  for (const auto& [id, follower] : followers_) {
    if (auto reader = follower.reader.lock()) {
      readers.push_back(std::move(reader));
    }
  }
  return readers;
}

namespace {

void WakeAll(const std::vector<std::shared_ptr<JobReader>>& readers) {
  for (const std::shared_ptr<JobReader>& reader : readers) reader->Wake();
}

}  // namespace

void JobJournal::Drop(OutputStream stream, std::size_t bytes) {
  dropped_.of(stream) += bytes;
  if (dropped_total_ != nullptr) *dropped_total_ += bytes;
}

void JobJournal::CountDropsInto(std::atomic<uint64_t>* total) {
  absl::MutexLock lock(&mu_);
  dropped_total_ = total;
}

void JobJournal::DropFront(bool unread) {
  const Entry& front = entries_.front();
  retained_ -= front.chunk.size;
  if (unread) {
    unread_ -= front.chunk.size;
    Drop(front.chunk.stream, front.chunk.size);
    cursor_.seq = front.seq + 1;
  }
  entries_.pop_front();
}

void JobJournal::Evict(std::size_t incoming) {
  const std::size_t buffer =
      std::max(limits_.buffer_bytes, limits_.outbox_bytes);
  while (!entries_.empty() && retained_ + incoming > buffer) {
    const bool unread = entries_.front().seq >= cursor_.seq;
    if (unread && !limits_.drop_oldest) return;
    DropFront(unread);
  }
}

JobContext::EmitResult JobJournal::Append(OutputStream stream, std::string data,
                                          TimePoint deadline) {
  using EmitResult = JobContext::EmitResult;
  if (data.empty()) return EmitResult::kSent;
  const auto buffer = std::make_shared<const std::string>(std::move(data));
  std::vector<std::shared_ptr<JobReader>> wake;
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
    wake = Readers();
  }
  WakeAll(wake);
  return EmitResult::kSent;
}

void JobJournal::End(JobOutcome outcome) {
  std::vector<std::shared_ptr<JobReader>> wake;
  {
    absl::MutexLock lock(&mu_);
    if (outcome_) return;
    outcome_ = std::move(outcome);
    wake = Readers();
  }
  room_.SignalAll();
  WakeAll(wake);
}

void JobJournal::Cancelled() {
  std::vector<std::shared_ptr<JobReader>> wake;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    // Unread output goes, so the outcome is what a reader gets next.
    while (!entries_.empty() && entries_.back().seq >= cursor_.seq) {
      const Entry& back = entries_.back();
      retained_ -= back.chunk.size;
      unread_ -= back.chunk.size;
      Drop(back.chunk.stream, back.chunk.size);
      entries_.pop_back();
    }
    cursor_.seq = next_seq_;
    wake = Readers();
  }
  room_.SignalAll();
  WakeAll(wake);
}

JobJournal::Attachment JobJournal::Attach(
    const std::shared_ptr<JobReader>& reader, StreamOffsets from, Role role) {
  std::shared_ptr<JobReader> taken_over;
  Attachment attachment;
  {
    absl::MutexLock lock(&mu_);
    // Read again from the oldest output kept; what is older than that, or
    // was dropped, is lost to this reader. An offset past what was written
    // is kept as asked: the reader waits for those bytes.
    StreamOffsets first = written_;  // the first byte kept, per stream
    for (const Entry& e : entries_) {
      uint64_t& f = first.of(e.chunk.stream);
      f = std::min(f, e.chunk.offset);
    }
    for (const OutputStream s :
         {OutputStream::kStdout, OutputStream::kStderr}) {
      const uint64_t asked = from.of(s);
      attachment.from.of(s) = std::max(asked, first.of(s));
      attachment.lost.of(s) = attachment.from.of(s) - asked;
    }
    const Cursor cursor{
        .seq = entries_.empty() ? next_seq_ : entries_.front().seq,
        .from = attachment.from};
    attachment.ended = outcome_.has_value();
    attachment.controls = role == Role::kControl && !attachment.ended;
    if (attachment.controls) {
      if (controller_id_ != reader.get()) taken_over = controller_.lock();
      followers_.erase(reader.get());
      controller_ = reader;
      controller_id_ = reader.get();
      cursor_ = cursor;
      unread_ = retained_;
    } else {
      if (controller_id_ == reader.get()) {
        controller_.reset();
        controller_id_ = nullptr;
      }
      followers_[reader.get()] = Follower{reader, cursor};
    }
  }
  room_.SignalAll();
  if (taken_over) taken_over->Wake();
  return attachment;
}

bool JobJournal::Advance(Cursor& cursor, bool controls, Chunk& chunk,
                         bool& room) {
  if (entries_.empty()) return false;
  // Entries hold consecutive seqs: the next one unread is found by index.
  const uint64_t front = entries_.front().seq;
  for (std::size_t i = cursor.seq > front ? cursor.seq - front : 0;
       i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    cursor.seq = e.seq + 1;
    // With no controller, flow control follows the reader furthest ahead.
    if (controls || (controller_id_ == nullptr && e.seq >= cursor_.seq)) {
      if (!controls) cursor_.seq = e.seq + 1;
      unread_ -= e.chunk.size;
      room = true;
    }
    const uint64_t end = e.chunk.offset + e.chunk.size;
    uint64_t& from = cursor.from.of(e.chunk.stream);
    if (end <= from) continue;  // read before: skipped
    chunk = e.chunk;
    const std::size_t skip = static_cast<std::size_t>(
        std::max(from, e.chunk.offset) - e.chunk.offset);
    chunk.offset += skip;
    chunk.begin += skip;
    chunk.size -= skip;
    chunk.lost = chunk.offset - std::min(from, chunk.offset);
    from = end;
    return true;
  }
  return false;
}

JobJournal::Read JobJournal::Next(const JobReader* reader, Chunk& chunk,
                                  JobOutcome& outcome) {
  bool room = false;
  Read read = Read::kNothing;
  {
    absl::MutexLock lock(&mu_);
    Cursor* cursor = nullptr;
    const bool controls = reader == controller_id_ && reader != nullptr;
    if (controls) {
      cursor = &cursor_;
    } else if (const auto it = followers_.find(reader);
               it != followers_.end()) {
      cursor = &it->second.cursor;
    } else {
      return Read::kTakenOver;
    }
    if (Advance(*cursor, controls, chunk, room)) {
      read = Read::kChunk;
    } else if (outcome_) {
      outcome = *outcome_;
      read = Read::kOutcome;
    }
  }
  if (room) room_.SignalAll();
  return read;
}

void JobJournal::Claimed() {
  absl::MutexLock lock(&mu_);
  if (outcome_) claimed_ = true;
}

JobJournal::Left JobJournal::Leave(const JobReader* reader) {
  Left left;
  {
    absl::MutexLock lock(&mu_);
    if (reader != nullptr && reader == controller_id_) {
      controller_.reset();
      controller_id_ = nullptr;
      left.controller = true;
    } else if (followers_.erase(reader) == 0) {
      return left;
    }
    left.unattended =
        !outcome_ && controller_id_ == nullptr && followers_.empty();
  }
  if (left.controller) room_.SignalAll();  // the limit is the buffer's now
  return left;
}

void JobJournal::Release() {
  absl::MutexLock lock(&mu_);
  while (!entries_.empty()) DropFront(entries_.front().seq >= cursor_.seq);
}

JobJournal::Stats JobJournal::stats() const {
  absl::MutexLock lock(&mu_);
  const auto readers = static_cast<uint32_t>(
      followers_.size() + (controller_id_ != nullptr ? 1 : 0));
  return Stats{.retained_bytes = retained_,
               .written = written_,
               .dropped = dropped_,
               .attached = readers > 0,
               .readers = readers,
               .ended = outcome_.has_value(),
               .claimed = claimed_};
}

bool JobJournal::attached() const {
  absl::MutexLock lock(&mu_);
  return controller_id_ != nullptr || !followers_.empty();
}

}  // namespace cfdb::worker

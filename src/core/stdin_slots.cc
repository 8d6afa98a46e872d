#include "core/stdin_slots.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace cfdb::worker {

StdinSlots::StdinSlots(bool streamed)
    : streamed_(streamed),
      fd_(streamed ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1),
      ended_(!streamed) {}

StdinSlots::~StdinSlots() {
  if (const int fd = fd_.load(); fd >= 0) close(fd);
}

void StdinSlots::SetReady(bool ready) {
  const int fd = fd_.load();
  if (fd < 0) return;
  uint64_t value = 1;
  if (ready) {
    (void)!write(fd, &value, sizeof value);
  } else {
    (void)!read(fd, &value, sizeof value);
  }
}

bool StdinSlots::BeginRead() {
  absl::MutexLock lock(&mu_);
  if (in_read_ || waiting_ == 2 || ended_ || cut_short_) return false;
  in_read_ = true;
  return true;
}

StdinSlots::Next StdinSlots::Put(Arrived what, std::string& chunk,
                                 bool job_ended) {
  absl::MutexLock lock(&mu_);
  in_read_ = false;
  const bool unwanted = closed_ || job_ended;
  switch (what) {
    case Arrived::kChunk:
      // Unwanted: discarded, and the reader reads on until the end.
      if (!unwanted) {
        // Into the first free slot (the consumed buffer there becomes the
        // next to read into); with both filled BeginRead refuses until the
        // job takes one. fd() is readable already unless none waited.
        slots_[waiting_++].swap(chunk);
        if (waiting_ == 1 && !ended_) SetReady(true);
      }
      return Next::kRead;
    case Arrived::kEnd:
      if (unwanted) return Next::kStop;   // after Close: nothing to read
      if (waiting_ == 0) SetReady(true);  // else readable already
      ended_ = true;
      return Next::kStop;
    case Arrived::kClosed:
      // A read fails when the client half-closes and when the call is
      // cancelled: either way, without end_of_input, the input was cut
      // short, and a job still taking it must not see its end.
      return unwanted ? Next::kStop : Next::kCutShort;
    case Arrived::kInvalid:
      return Next::kCutShort;
  }
  return Next::kCutShort;
}

void StdinSlots::MarkCutShort() {
  absl::MutexLock lock(&mu_);
  cut_short_ = true;
}

StdinSlots::Result StdinSlots::Take(std::string& chunk) {
  absl::MutexLock lock(&mu_);
  if (waiting_ == 0) return ended_ ? Result::kEnd : Result::kNotYet;
  chunk.swap(slots_[0]);
  slots_[0].swap(slots_[1]);
  if (--waiting_ == 0 && !ended_) SetReady(false);
  return Result::kChunk;
}

bool StdinSlots::Close() {
  absl::MutexLock lock(&mu_);
  if (!streamed_ || closed_) return false;
  closed_ = true;
  waiting_ = 0;
  return !ended_;
}

void StdinSlots::Release() {
  absl::MutexLock lock(&mu_);
  if (const int fd = fd_.exchange(-1); fd >= 0) close(fd);
}

}  // namespace cfdb::worker

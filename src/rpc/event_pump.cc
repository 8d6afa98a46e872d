#include "rpc/event_pump.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/text.h"
#include "rpc/calls.h"
#include "rpc/wire.h"

namespace cfdb::worker {

void EventPump::Send(grpc::ByteBuffer event) {
  {
    absl::MutexLock lock(&mu_);
    sends_.push_back(std::move(event));
  }
  Kick();
}

void EventPump::Read(std::shared_ptr<Job> job) {
  bool gone = false;
  {
    absl::MutexLock lock(&mu_);
    job_ = std::move(job);
    gone = !failure_.ok();
  }
  // A client gone before the job was read leaves it as any other does.
  if (gone) Leave();
  Kick();
}

void EventPump::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = status;
  }
  Kick();
}

bool EventPump::StartRead(grpc::ByteBuffer* into) {
  CallSide* reactor = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || reactor_ == nullptr || !failure_.ok()) return false;
    ++starting_reads_;
    reactor = reactor_;
  }
  reactor->ReadInput(into);
  {
    absl::MutexLock lock(&mu_);
    --starting_reads_;
  }
  Kick();  // a Finish may have waited for the read to start
  return true;
}

void EventPump::WriteDone(bool ok) {
  bool claimed = false;
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    in_write_ = false;
    if (!ok && failure_.ok()) {
      failure_ = absl::CancelledError("the client went away");
    }
    if (ok && writing_outcome_) {
      outcome_written_ = true;
      claimed = true;
    }
    writing_outcome_ = false;
    job = job_;
  }
  if (claimed && job != nullptr) job->journal().Claimed();
  if (!ok) Leave();
  Kick();
}

void EventPump::ClientCancelled() {
  Fail(absl::CancelledError("the client went away"));
  Leave();
}

void EventPump::ReactorDone() {
  Leave();
  absl::MutexLock lock(&mu_);
  reactor_ = nullptr;
  job_.reset();  // the job may hold this pump: no cycle
}

void EventPump::Leave() {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock lock(&mu_);
    if (left_ || job_ == nullptr) return;
    left_ = true;
    job = job_;
  }
  job->ReaderLeft(this);
}

void EventPump::Kick() {
  {
    absl::MutexLock lock(&mu_);
    kick_again_ = true;
    if (pumping_) return;  // the thread pumping goes round once more
    pumping_ = true;
  }
  for (;;) {
    CallSide* reactor = nullptr;
    std::shared_ptr<Job> job;
    std::optional<grpc::Status> finish;
    bool write = false;
    bool outcome_event = false;
    {
      absl::MutexLock lock(&mu_);
      kick_again_ = false;
      if (in_write_ || finished_ || starting_reads_ > 0 ||
          reactor_ == nullptr) {
        pumping_ = false;
        return;
      }
      reactor = reactor_;
      if (!failure_.ok()) {
        finished_ = true;
        finish = wire::ToGrpc(failure_);
      } else if (outcome_written_) {
        finished_ = true;
        finish = grpc::Status::OK;
      } else if (!sends_.empty()) {
        writing_.Swap(&sends_.front());
        sends_.pop_front();
        in_write_ = write = true;
      } else {
        job = job_;
      }
    }
    if (job != nullptr) {
      // Only the thread pumping reads the journal and fills writing_.
      JobJournal::Chunk chunk;
      JobOutcome outcome;
      switch (job->journal().Next(this, chunk, outcome)) {
        case JobJournal::Read::kChunk:
          wire::SerializeOutput(chunk, &writing_);
          write = true;
          break;
        case JobJournal::Read::kOutcome:
          Serialize(wire::OutcomeEvent(outcome), &writing_);
          write = outcome_event = true;
          break;
        case JobJournal::Read::kTakenOver: {
          absl::MutexLock lock(&mu_);
          if (failure_.ok()) {
            failure_ = absl::AbortedError(
                absl::StrCat("taken over: another call attached to job ",
                             EscapedForLog(job->request().job_id),
                             " with take_over; the job runs on under it"));
          }
          continue;
        }
        case JobJournal::Read::kNothing:
          break;
      }
      if (write) {
        absl::MutexLock lock(&mu_);
        in_write_ = true;
        writing_outcome_ = outcome_event;
      }
    }
    // Outside the lock: a reaction may run inline. `in_write_` or
    // `finished_` keeps everyone else from touching the reactor meanwhile.
    if (write) {
      reactor->WriteEvent(&writing_);
    } else if (finish) {
      reactor->FinishCall(*finish);
    }
    absl::MutexLock lock(&mu_);
    if (!kick_again_) {
      pumping_ = false;
      return;
    }
  }
}

}  // namespace cfdb::worker

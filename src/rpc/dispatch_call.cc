// The Dispatch call: a StreamJob carries a job's events to its stream, in
// order, with flow control; the reactor finishes the call exactly once.
// Nothing here blocks inside a reaction.
#include "rpc/dispatch_call.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "core/log.h"
#include "core/text.h"
#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// Output queued for one client beyond the message being written. Emit blocks
// past this, which stalls the job and bounds the worker's memory per job.
constexpr std::size_t kOutboxLimitBytes = std::size_t{256} * 1024;

// Refusals come in floods from retrying clients (docket full) or hostile
// ones: one line per status code per this long, with a count of the rest.
constexpr Duration kRefusalLogEvery = std::chrono::seconds(10);

class DispatchReactor;

// RefusalLog decides which refusals are logged. Thread-safe.
class RefusalLog {
 public:
  // Admit returns whether a refusal with `code` is logged now and, if so,
  // how many of that code went unlogged since the last.
  std::optional<int> Admit(absl::StatusCode code) {
    absl::MutexLock lock(&mu_);
    Entry& entry = entries_[static_cast<int>(code)];
    const TimePoint now = SteadyClock::Get().Now();
    if (entry.logged && now - entry.last < kRefusalLogEvery) {
      ++entry.unlogged;
      return std::nullopt;
    }
    const int unlogged = entry.unlogged;
    entry = Entry{.logged = true, .last = now};
    return unlogged;
  }

 private:
  struct Entry {
    bool logged = false;
    TimePoint last;
    int unlogged = 0;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<int, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// LogRefusal logs a Dispatch refused before its job was tracked, the same
// way whatever refused it; the job id as escaped text, since it may be the
// very thing that was wrong. A call whose client left before its request
// arrived is not a refusal worth a line.
void LogRefusal(const std::string& job_id, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kCancelled) return;
  static RefusalLog* const log = new RefusalLog;  // never destroyed
  const std::optional<int> unlogged = log->Admit(status.code());
  if (!unlogged) return;
  const std::string more =
      *unlogged > 0
          ? absl::StrCat(" (and ", *unlogged, " more like it since the last)")
          : "";
  const std::string id = EscapedForLog(job_id);
  LogEvent(
      spdlog::level::info,
      absl::StrCat("job ", id, ": refused: ", status.ToString(), more),
      {{"job_id", id}, {"grpc_code", absl::StatusCodeToString(status.code())}});
}

// StreamJob is a job whose events go to one Dispatch stream. It outlives the
// reactor when the client goes first; `reactor_` is null from then on.
class StreamJob final : public Job {
 public:
  StreamJob(JobRequest request, Duration kill_grace, DispatchReactor* reactor)
      : Job(std::move(request), kill_grace), reactor_(reactor) {}

  void OnAccepted() override {
    v1::DispatchEvent accepted;
    accepted.mutable_accepted();
    Push(std::move(accepted));
  }

  EmitResult Emit(OutputStream stream, std::string_view data,
                  TimePoint deadline) override;

  void OnOutcome(const JobOutcome& outcome) override {
    Push(wire::OutcomeEvent(outcome), /*terminal=*/true);
  }

  // Called by the reactor.
  void WriteDone(bool ok);
  void ClientCancelled();
  void ReactorDone();

 protected:
  // A cancelled job's output is discarded (RunExec drops it too), so the
  // output still queued goes now: the job's terminal event is written next,
  // and a client that reads slowly still learns how its job ended.
  void OnCancelled() override {
    {
      absl::MutexLock lock(&mu_);
      std::erase_if(outbox_, [this](const v1::DispatchEvent& e)
                                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                   if (!e.has_output()) return false;
                                   outbox_bytes_ -= e.ByteSizeLong();
                                   return true;
                                 });
    }
    room_.SignalAll();
  }

 private:
  void Push(v1::DispatchEvent event, bool terminal = false);
  // Kick starts the next write or finishes the call; call without mu_.
  void Kick();

  absl::Mutex mu_;
  DispatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::DispatchEvent> outbox_ ABSL_GUARDED_BY(mu_);
  std::size_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer writing_;  // the event of the write in flight
  bool in_write_ ABSL_GUARDED_BY(mu_) = false;
  bool terminal_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // client gone / write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  CondVar room_;  // signalled when Emit may go on: room, broken or cancelled
};

class DispatchReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  DispatchReactor(Worker& worker, CallTracker& calls,
                  absl::StatusOr<v1::DispatchRequest> request)
      : calls_(calls) {
    calls_.Started();
    absl::StatusOr<JobRequest> job_request =
        request.ok() ? wire::FromProto(*request) : request.status();
    if (!job_request.ok()) {
      LogRefusal(request.ok() ? request->job_id() : "", job_request.status());
      Finish(wire::ToGrpc(job_request.status()));
      return;
    }
    job_ = std::make_shared<StreamJob>(*std::move(job_request),
                                       worker.options().task_kill_grace, this);
    if (absl::Status s = worker.Dispatch(job_); !s.ok()) {
      LogRefusal(request->job_id(), s);
      job_.reset();
      Finish(wire::ToGrpc(s));
    }
  }

  void OnWriteDone(bool ok) override { job_->WriteDone(ok); }
  void OnCancel() override {
    if (job_) job_->ClientCancelled();
  }
  void OnDone() override {
    if (job_) job_->ReactorDone();
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
  std::shared_ptr<StreamJob> job_;
};

Job::EmitResult StreamJob::Emit(OutputStream stream, std::string_view data,
                                TimePoint deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (!room_.AwaitUntil(mu_, deadline,
                          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                            return outbox_bytes_ < kOutboxLimitBytes ||
                                   broken_ || cancelled();
                          })) {
      return EmitResult::kTimedOut;
    }
    if (broken_ || cancelled()) return EmitResult::kDropped;
  }
  Push(wire::OutputEvent(stream, data));
  return EmitResult::kSent;
}

void StreamJob::Push(v1::DispatchEvent event, bool terminal) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_) return;
    outbox_bytes_ += event.ByteSizeLong();
    outbox_.push_back(std::move(event));
    terminal_queued_ = terminal_queued_ || terminal;
  }
  Kick();
}

void StreamJob::Kick() {
  DispatchReactor* reactor = nullptr;
  grpc::Status finish;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    if (in_write_ || finished_ || reactor_ == nullptr) return;
    if (!outbox_.empty() && !broken_) {
      outbox_bytes_ -= outbox_.front().ByteSizeLong();
      Serialize(outbox_.front(), &writing_);
      outbox_.pop_front();
      in_write_ = true;
      write = true;
      room_.SignalAll();
    } else if (broken_ || terminal_queued_) {
      // Everything up to the terminal event is written (or the client left).
      finished_ = true;
      finish = broken_ ? grpc::Status(grpc::StatusCode::CANCELLED,
                                      "the client went away; job cancelled")
                       : grpc::Status::OK;
    } else {
      return;
    }
    reactor = reactor_;
  }
  // Outside the lock: a reaction may run inline. `in_write_` or `finished_`
  // keeps everyone else from touching the reactor meanwhile.
  if (write) {
    reactor->StartWrite(&writing_);
  } else {
    reactor->Finish(finish);
  }
}

void StreamJob::WriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    in_write_ = false;
    if (!ok) broken_ = true;
  }
  if (!ok) {
    room_.SignalAll();
    Cancel();
  }
  Kick();
}

void StreamJob::ClientCancelled() {
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }
  room_.SignalAll();
  Cancel();
  Kick();
}

void StreamJob::ReactorDone() {
  absl::MutexLock lock(&mu_);
  reactor_ = nullptr;
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDispatch(
    Worker& worker, CallTracker& calls,
    absl::StatusOr<v1::DispatchRequest> request) {
  return new DispatchReactor(worker, calls, std::move(request));
}

}  // namespace cfdb::worker

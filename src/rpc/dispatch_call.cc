// The Dispatch call: a StreamJob carries a job's events to its stream, in
// order, with flow control; the reactor finishes the call exactly once.
// Nothing here blocks inside a reaction.
#include "rpc/dispatch_call.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
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
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// Output queued for one client beyond the message being written. Emit blocks
// past this, which stalls the job and bounds the worker's memory per job.
constexpr std::size_t kOutboxLimitBytes = std::size_t{256} * 1024;

// The largest stdin chunk a DispatchStream message may carry (the client
// sends at most 256 KiB), so that a job's input costs the worker a known
// amount: two chunks waiting and one being parsed.
constexpr uint32_t kMaxStdinChunkBytes = uint32_t{4} << 20;

// Refusals come in floods from retrying clients (docket full) or hostile
// ones: one line per status code per this long, with a count of the rest.
constexpr Duration kRefusalLogEvery = std::chrono::seconds(10);

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

// CallSide is what a StreamJob needs of its call's reactor. Reactions of
// gRPC may run inline, so StreamJob calls these without holding its lock.
class CallSide {
 public:
  virtual void WriteEvent(const grpc::ByteBuffer* bytes) = 0;
  virtual void FinishCall(const grpc::Status& status) = 0;
  // ReadInput starts reading the next DispatchInput (DispatchStream only).
  virtual void ReadInput(grpc::ByteBuffer* into) = 0;

 protected:
  ~CallSide() = default;
};

// StreamJob is a job whose events go to one Dispatch or DispatchStream
// stream, and whose stdin, for DispatchStream, comes from it. It outlives the
// reactor when the client goes first; `reactor_` is null from then on.
class StreamJob final : public Job {
 public:
  StreamJob(JobRequest request, Duration kill_grace, CallSide* reactor,
            bool stdin_streamed)
      : Job(std::move(request), kill_grace),
        reactor_(reactor),
        stdin_streamed_(stdin_streamed),
        stdin_fd_(stdin_streamed ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
                                 : -1) {}
  ~StreamJob() override {
    if (stdin_fd_ >= 0) close(stdin_fd_);
  }

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

  bool stdin_streamed() const override { return stdin_streamed_; }
  int stdin_fd() const override { return stdin_fd_; }
  StdinResult TakeStdin(std::string& chunk) override;
  void CloseStdin() override;

  // Called by the reactor.
  void WriteDone(bool ok);
  void ClientCancelled();
  void ReactorDone();
  // StartInput reads the first stdin chunk (DispatchStream, once accepted).
  void StartInput() { ReadNext(); }
  // InputRead takes the DispatchInput a ReadInput asked for; `ok` false
  // when the client half-closed (or the call ended).
  void InputRead(bool ok);
  // Refuse finishes the call with `status` (the worker refused the job).
  void Refuse(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      violation_ = status;
      broken_ = true;
    }
    Kick();
  }

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
  // ReadNext starts the next input read unless one is in flight or no more
  // is wanted; call without mu_.
  void ReadNext();
  enum class Input { kChunk, kEnd, kBad, kTooLarge };
  // ParseInput reads the message of the last read: a stdin chunk (into
  // incoming_), the end of input, or neither.
  Input ParseInput();
  // SetStdinReady makes stdin_fd readable (true) or not (false).
  void SetStdinReady(bool ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  CallSide* reactor_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::DispatchEvent> outbox_ ABSL_GUARDED_BY(mu_);
  std::size_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ByteBuffer writing_;  // the event of the write in flight
  bool in_write_ ABSL_GUARDED_BY(mu_) = false;
  bool terminal_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // client gone / write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Not OK when the client broke the protocol: the call ends with it.
  absl::Status violation_ ABSL_GUARDED_BY(mu_);
  CondVar room_;  // signalled when Emit may go on: room, broken or cancelled

  // Streamed stdin: at most one read in flight and two chunks waiting (the
  // next read starts as soon as a chunk arrives, not once the job took it,
  // so the job need not wait a round trip for each chunk).
  const bool stdin_streamed_;
  const int stdin_fd_;        // an eventfd, readable while not kNotYet
  grpc::ByteBuffer reading_;  // the message of the read in flight
  std::string incoming_;      // the chunk it carried, before its slot
  // Chunks waiting for the job, in order: the first `waiting_` slots.
  std::string slots_[2] ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_read_ ABSL_GUARDED_BY(mu_) = false;
  // Reads being started outside the lock (ReadNext): Finish waits for 0.
  int starting_reads_ ABSL_GUARDED_BY(mu_) = 0;
  bool input_ended_ ABSL_GUARDED_BY(mu_) = !stdin_streamed_;  // no more
  bool stdin_closed_ ABSL_GUARDED_BY(mu_) = false;  // the job took its last
};

// StartJob hands the job of `request` to `worker`, its events to go to
// `reactor`, which holds the job from before Dispatch (its first event may
// be written, and the write's reaction run, before Dispatch returns). A
// refusal is logged and finishes the call.
template <typename Reactor>
void StartJob(Worker& worker, absl::StatusOr<v1::DispatchRequest> request,
              Reactor* reactor, bool stdin_streamed) {
  absl::StatusOr<JobRequest> job_request =
      request.ok() ? wire::FromProto(*request) : request.status();
  if (!job_request.ok()) {
    LogRefusal(request.ok() ? request->job_id() : "", job_request.status());
    reactor->Finish(wire::ToGrpc(job_request.status()));
    return;
  }
  auto job = std::make_shared<StreamJob>(*std::move(job_request),
                                         worker.options().task_kill_grace,
                                         reactor, stdin_streamed);
  reactor->SetJob(job);
  if (absl::Status s = worker.Dispatch(job); !s.ok()) {
    LogRefusal(request->job_id(), s);
    job->Refuse(s);  // finishes the call, once, whatever came meanwhile
  } else if (stdin_streamed) {
    job->StartInput();
  }
}

// JobReactor is what both calls' reactors share: a StreamJob's writes and
// finish, and its reactions to the client's cancel and the call's end.
template <typename Base>
class JobReactor : public Base, public CallSide {
 public:
  explicit JobReactor(CallTracker& calls) : calls_(calls) { calls_.Started(); }

  void WriteEvent(const grpc::ByteBuffer* bytes) override {
    this->StartWrite(bytes);
  }
  void FinishCall(const grpc::Status& status) override { this->Finish(status); }
  void ReadInput(grpc::ByteBuffer*) override {}

  void OnWriteDone(bool ok) override { job()->WriteDone(ok); }
  // OnCancel may run at the same time as any other reaction, so the job
  // is read under a lock; a cancel before the job exists is passed on by
  // SetJob.
  void OnCancel() override {
    std::shared_ptr<StreamJob> cancelled;
    {
      absl::MutexLock lock(&job_mu_);
      cancelled_ = true;
      cancelled = job_;
    }
    if (cancelled) cancelled->ClientCancelled();
  }
  void OnDone() override {
    if (std::shared_ptr<StreamJob> done = job()) done->ReactorDone();
    calls_.Done();
    delete this;
  }

  void SetJob(const std::shared_ptr<StreamJob>& job) {
    bool cancelled = false;
    {
      absl::MutexLock lock(&job_mu_);
      job_ = job;
      cancelled = cancelled_;
    }
    if (cancelled) job->ClientCancelled();
  }

 protected:
  std::shared_ptr<StreamJob> job() {
    absl::MutexLock lock(&job_mu_);
    return job_;
  }

  CallTracker& calls_;

 private:
  absl::Mutex job_mu_;
  std::shared_ptr<StreamJob> job_ ABSL_GUARDED_BY(job_mu_);
  bool cancelled_ ABSL_GUARDED_BY(job_mu_) = false;
};

// Dispatch: the request came with the call; events only.
class DispatchReactor final
    : public JobReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  DispatchReactor(Worker& worker, CallTracker& calls,
                  absl::StatusOr<v1::DispatchRequest> request)
      : JobReactor(calls) {
    StartJob(worker, std::move(request), this, false);
  }
};

// DispatchStream: the request is the first message, stdin chunks follow.
class DispatchStreamReactor final
    : public JobReactor<
          grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>> {
 public:
  DispatchStreamReactor(Worker& worker, CallTracker& calls, Gate gate,
                        grpc::CallbackServerContext* context)
      : JobReactor(calls), worker_(worker), gate_(gate), context_(context) {
    StartRead(&first_);
  }

  void ReadInput(grpc::ByteBuffer* into) override { StartRead(into); }

  void OnReadDone(bool ok) override {
    if (started_) {
      if (std::shared_ptr<StreamJob> job = this->job()) job->InputRead(ok);
      return;
    }
    started_ = true;
    absl::StatusOr<v1::DispatchInput> input = gate_.Open<v1::DispatchInput>(
        *context_, ok ? first_ : grpc::ByteBuffer(), MethodGroup::kControl,
        "DispatchStream");
    if (absl::IsPermissionDenied(input.status()) ||
        absl::IsCancelled(input.status())) {
      Finish(wire::ToGrpc(input.status()));
      return;
    }
    absl::StatusOr<v1::DispatchRequest> request = absl::InvalidArgumentError(
        "the first DispatchStream message must be a request");
    if (!input.ok()) {
      request = input.status();
    } else if (input->has_request()) {
      request = std::move(*input->mutable_request());
    }
    StartJob(worker_, std::move(request), this, true);
  }

 private:
  Worker& worker_;
  Gate gate_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer first_;
  bool started_ = false;  // the first message was read
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
  CallSide* reactor = nullptr;
  grpc::Status finish;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    if (in_write_ || finished_ || starting_reads_ > 0 || reactor_ == nullptr) {
      return;
    }
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
      finish = !violation_.ok() ? wire::ToGrpc(violation_)
               : broken_        ? grpc::Status(grpc::StatusCode::CANCELLED,
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
    reactor->WriteEvent(&writing_);
  } else {
    reactor->FinishCall(finish);
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

void StreamJob::SetStdinReady(bool ready) {
  if (stdin_fd_ < 0) return;
  uint64_t value = 1;
  if (ready) {
    (void)!write(stdin_fd_, &value, sizeof value);
  } else {
    (void)!read(stdin_fd_, &value, sizeof value);
  }
}

void StreamJob::ReadNext() {
  CallSide* reactor = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (in_read_ || waiting_ == 2 || input_ended_ || broken_ || finished_ ||
        reactor_ == nullptr) {
      return;
    }
    in_read_ = true;
    ++starting_reads_;
    reactor = reactor_;
  }
  reactor->ReadInput(&reading_);
  {
    absl::MutexLock lock(&mu_);
    --starting_reads_;
  }
  Kick();  // a Finish may have waited for the read to start
}

StreamJob::Input StreamJob::ParseInput() {
  // The common message, one `stdin` field, is read straight into
  // `incoming_`, whose buffer is reused (a parse into a DispatchInput would
  // free and allocate a chunk-sized string for every message).
  Input input = Input::kBad;
  {
    grpc::ProtoBufferReader reader(&reading_);
    google::protobuf::io::CodedInputStream in(&reader);
    constexpr uint32_t kStdinTag = (2 << 3) | 2;  // field 2, length-delimited
    uint32_t size = 0;
    if (in.ReadTag() == kStdinTag && in.ReadVarint32(&size)) {
      input = size > kMaxStdinChunkBytes ? Input::kTooLarge
              : in.ReadString(&incoming_, static_cast<int>(size)) &&
                      in.ReadTag() == 0
                  ? Input::kChunk
                  : Input::kBad;
    }
  }
  if (input == Input::kBad) {  // anything else: the whole parse
    v1::DispatchInput message;
    if (ParseInto(reading_, message)) {
      if (message.has_stdin()) {
        input = message.stdin().size() > kMaxStdinChunkBytes ? Input::kTooLarge
                                                             : Input::kChunk;
        incoming_.swap(*message.mutable_stdin());
      } else if (message.has_end_of_input()) {
        input = Input::kEnd;
      }
    }
  }
  reading_.Clear();  // its slices go now, not at the next read
  return input;
}

void StreamJob::InputRead(bool ok) {
  const Input input = ok ? ParseInput() : Input::kBad;
  {
    absl::MutexLock lock(&mu_);
    in_read_ = false;
    const bool unwanted = stdin_closed_ || terminal_queued_ || finished_;
    if (!ok && unwanted) return;
    if (input == Input::kChunk && unwanted) {
      // The job takes no more input: discard what comes, until the end.
    } else if (input == Input::kChunk) {
      // Into the first free slot (the consumed buffer there becomes the
      // next to read into); with both filled no read is started until the
      // job takes one.
      slots_[waiting_++].swap(incoming_);
      SetStdinReady(true);
    } else if (input == Input::kEnd && !unwanted) {
      input_ended_ = true;
      SetStdinReady(true);
      return;
    } else if (input != Input::kEnd) {
      // A read fails when the client half-closes and when the call is
      // cancelled, and gRPC may not yet know which: either way the input
      // was cut short (no end_of_input), so the job must not see its end.
      violation_ = absl::InvalidArgumentError(
          !ok ? "the input ended without end_of_input: cut short, so the job "
                "was cancelled"
          : input == Input::kTooLarge
              ? absl::StrCat("a stdin chunk is over the limit of ",
                             kMaxStdinChunkBytes, " bytes")
              : "a DispatchStream message after the first must be stdin or "
                "end_of_input");
      broken_ = true;
    }
  }
  if (input == Input::kEnd) return;  // after input_closed: nothing to read
  if (!ok || input == Input::kBad || input == Input::kTooLarge) {
    room_.SignalAll();
    Cancel();
    Kick();
    return;
  }
  ReadNext();
}

Job::StdinResult StreamJob::TakeStdin(std::string& chunk) {
  {
    absl::MutexLock lock(&mu_);
    if (waiting_ == 0) {
      return input_ended_ ? StdinResult::kEnd : StdinResult::kNotYet;
    }
    chunk.swap(slots_[0]);
    slots_[0].swap(slots_[1]);
    if (--waiting_ == 0 && !input_ended_) SetStdinReady(false);
  }
  ReadNext();
  return StdinResult::kChunk;
}

void StreamJob::CloseStdin() {
  bool tell = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stdin_streamed_ || stdin_closed_) return;
    stdin_closed_ = true;
    waiting_ = 0;
    tell = !input_ended_;
  }
  if (!tell) return;
  v1::DispatchEvent closed;
  closed.mutable_input_closed();
  Push(std::move(closed));
  ReadNext();
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDispatch(
    Worker& worker, CallTracker& calls,
    absl::StatusOr<v1::DispatchRequest> request) {
  return new DispatchReactor(worker, calls, std::move(request));
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
StartDispatchStream(Worker& worker, CallTracker& calls, Gate gate,
                    grpc::CallbackServerContext* context) {
  return new DispatchStreamReactor(worker, calls, gate, context);
}

}  // namespace cfdb::worker

// The calls that carry a job's events: Dispatch, DispatchStream and Attach.
// Each call has an EventPump (event_pump.h) that writes the job's events; a
// DispatchStream job also reads its stdin from its call (StreamJob), into
// StdinSlots (core/stdin_slots.h).
// Nothing here blocks inside a reaction.
#include "rpc/dispatch_call.h"

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "core/log.h"
#include "core/log_throttle.h"
#include "core/stdin_slots.h"
#include "core/text.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "rpc/event_pump.h"
#include "rpc/unix_socket.h"
#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// LogRefusal logs a Dispatch refused before its job was tracked, the same
// way whatever refused it; the job id as escaped text, since it may be the
// very thing that was wrong.
void LogRefusal(LogThrottle& log, const std::string& job_id,
                const absl::Status& status) {
  const std::string id = EscapedForLog(job_id);
  LogRefused(log, "Dispatch", absl::StrCat("job ", id), status,
             {{"job_id", id}});
}

grpc::ByteBuffer Serialized(const v1::DispatchEvent& event) {
  grpc::ByteBuffer bytes;
  Serialize(event, &bytes);
  return bytes;
}

// StreamJob is a job of a Dispatch or DispatchStream call. For
// DispatchStream its stdin comes from that call, read with flow control:
// at most one read in flight, and what arrived waits in its StdinSlots
// (core/stdin_slots.h), which say when to read again.
class StreamJob final : public Job {
 public:
  StreamJob(JobRequest request, const WorkerOptions& options,
            std::shared_ptr<EventPump> call, bool stdin_streamed)
      : Job(std::move(request), options.task_kill_grace,
            options.output_buffer_bytes),
        call_(std::move(call)),
        stdin_(stdin_streamed) {}

  void OnOutcome(const JobOutcome&) override { stdin_.Release(); }

  void OnAccepted() override {
    v1::DispatchEvent accepted;
    accepted.mutable_accepted();
    call_->Send(Serialized(accepted));
  }

  bool stdin_streamed() const override { return stdin_.streamed(); }
  int stdin_fd() const override { return stdin_.fd(); }
  StdinResult TakeStdin(std::string& chunk) override {
    const StdinResult result = stdin_.Take(chunk);
    if (result == StdinResult::kChunk) ReadNext();
    return result;
  }
  void CloseStdin() override;

  // StartInput reads the first stdin chunk (DispatchStream, once accepted).
  void StartInput() { ReadNext(); }
  // InputRead takes the DispatchInput a read asked for; `ok` false when the
  // client half-closed (or the call ended).
  void InputRead(bool ok);

 private:
  // ReadNext starts the next input read if the slots want one.
  void ReadNext();
  enum class Input { kChunk, kEnd, kBad, kTooLarge };
  // ParseInput reads the message of the last read: a stdin chunk (into
  // incoming_), the end of input, or neither.
  Input ParseInput();
  // CutShort ends the call with `violation` and cancels the job: its input
  // did not end as it must.
  void CutShort(const absl::Status& violation);

  // The call that dispatched the job: where its stdin comes from.
  const std::shared_ptr<EventPump> call_;
  StdinSlots stdin_;
  grpc::ByteBuffer reading_;  // the message of the read in flight
  std::string incoming_;      // the chunk it carried, before its slot
};

void StreamJob::ReadNext() {
  if (!stdin_.BeginRead()) return;
  // The call is over: its input was cut short.
  if (!call_->StartRead(&reading_)) InputRead(false);
}

StreamJob::Input StreamJob::ParseInput() {
  // The common message, one `stdin` field, is read straight into
  // `incoming_`, whose buffer is reused (a parse into a DispatchInput would
  // free and allocate a chunk-sized string for every message).
  Input input = Input::kBad;
  {
    grpc::ProtoBufferReader reader(&reading_);
    google::protobuf::io::CodedInputStream in(&reader);
    using google::protobuf::internal::WireFormatLite;
    constexpr uint32_t kStdinTag =
        WireFormatLite::MakeTag(v1::DispatchInput::kStdinFieldNumber,
                                WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
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

void StreamJob::CutShort(const absl::Status& violation) {
  stdin_.MarkCutShort();
  call_->Fail(violation);
  Cancel();
}

void StreamJob::InputRead(bool ok) {
  using Arrived = StdinSlots::Arrived;
  const Input input = ok ? ParseInput() : Input::kBad;
  const Arrived arrived = !ok                      ? Arrived::kClosed
                          : input == Input::kChunk ? Arrived::kChunk
                          : input == Input::kEnd   ? Arrived::kEnd
                                                   : Arrived::kInvalid;
  switch (stdin_.Put(arrived, incoming_, outcome().has_value())) {
    case StdinSlots::Next::kRead:
      return ReadNext();
    case StdinSlots::Next::kStop:
      return;
    case StdinSlots::Next::kCutShort:
      break;
  }
  // A read fails when the client half-closes and when the call is
  // cancelled, and gRPC may not yet know which: either way the input was
  // cut short (no end_of_input), so the job must not see its end.
  CutShort(absl::InvalidArgumentError(
      !ok ? "the input ended without end_of_input: cut short, so the job "
            "was cancelled"
      : input == Input::kTooLarge
          ? absl::StrCat("a stdin chunk is over the limit of ",
                         kMaxStdinChunkBytes, " bytes")
          : "a DispatchStream message after the first must be stdin or "
            "end_of_input"));
}

void StreamJob::CloseStdin() {
  if (!stdin_.Close()) return;
  v1::DispatchEvent closed;
  closed.mutable_input_closed();
  call_->Send(Serialized(closed));
  ReadNext();
}

// JobReactor is what every job call's reactor shares: an EventPump for its
// events, and the reactions that drive it.
template <typename Base>
class JobReactor : public Base, public CallSide {
 public:
  explicit JobReactor(CallTracker& calls) : calls_(calls) { calls_.Started(); }

  void WriteEvent(const grpc::ByteBuffer* bytes) override {
    this->StartWrite(bytes);
  }
  void FinishCall(const grpc::Status& status) override { this->Finish(status); }
  void ReadInput(grpc::ByteBuffer*) override {}

  void OnWriteDone(bool ok) override { pump_->WriteDone(ok); }
  void OnCancel() override { pump_->ClientCancelled(); }
  void OnDone() override {
    pump_->ReactorDone();
    calls_.Done();
    delete this;
  }

 protected:
  CallTracker& calls_;
  const std::shared_ptr<EventPump> pump_ = std::make_shared<EventPump>(this);
};

// AttachTo makes `pump` a reader of job `job_id` from `from`, as `role`,
// sending its `attached` first; the status when there is no such job or
// `caller` does not own it (nothing is sent then).
absl::Status AttachTo(Worker& worker, const std::string& job_id,
                      const JobCaller& caller, StreamOffsets from,
                      JobJournal::Role role,
                      const std::shared_ptr<EventPump>& pump) {
  auto attached = worker.Attach(job_id, caller, pump, from, role);
  if (!attached.ok()) return attached.status();
  auto& [job, attachment] = *attached;
  spdlog::info("job {}: a client attached from offsets {}/{}{}",
               EscapedForLog(job_id), attachment.from.stdout_bytes,
               attachment.from.stderr_bytes,
               attachment.ended      ? " (it has ended)"
               : attachment.controls ? " and took control"
                                     : " to follow it");
  pump->Send(Serialized(wire::AttachedEvent(attachment)));
  pump->Read(job);
  return absl::OkStatus();
}

// StartJob hands the job of `request` to `worker`, its events to go to
// `pump`, and returns it (null when none started). The pump reads the job's
// journal from before Dispatch (its first event may be written before Dispatch
// returns). A refusal is logged and finishes the call; a request that asked to
// attach to a job of its id that exists attaches instead.
std::shared_ptr<StreamJob> StartJob(Worker& worker, LogThrottle& log,
                                    absl::StatusOr<v1::DispatchRequest> request,
                                    const std::shared_ptr<EventPump>& pump,
                                    bool stdin_streamed,
                                    const JobCaller& caller) {
  absl::StatusOr<JobRequest> job_request =
      request.ok() ? wire::FromProto(*request) : request.status();
  if (!job_request.ok()) {
    LogRefusal(log, request.ok() ? request->job_id() : "",
               job_request.status());
    pump->Fail(job_request.status());
    return nullptr;
  }
  job_request->client = caller.identity;
  auto job = std::make_shared<StreamJob>(
      *std::move(job_request), worker.options(), pump, stdin_streamed);
  job->journal().Attach(pump, {}, JobJournal::Role::kControl);
  absl::Status s = worker.Dispatch(job);
  if (s.ok()) {
    pump->Read(job);
    return job;
  }
  if (absl::IsAlreadyExists(s) && request->attach_if_exists()) {
    s = AttachTo(worker, request->job_id(), caller, {},
                 JobJournal::Role::kFollow, pump);
    if (s.ok()) return nullptr;
  }
  LogRefusal(log, request->job_id(), s);
  pump->Fail(s);
  return nullptr;
}

// Dispatch: the request came with the call; events only.
class DispatchReactor final
    : public JobReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  DispatchReactor(Worker& worker, CallTracker& calls, LogThrottle& log,
                  absl::StatusOr<v1::DispatchRequest> request,
                  const JobCaller& caller)
      : JobReactor(calls) {
    StartJob(worker, log, std::move(request), pump_, false, caller);
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
      if (job_ != nullptr) job_->InputRead(ok);
      return;
    }
    started_ = true;
    absl::StatusOr<v1::DispatchInput> input = gate_.Open<v1::DispatchInput>(
        *context_, ok ? first_ : grpc::ByteBuffer(), method::kDispatchStream);
    if (absl::IsPermissionDenied(input.status()) ||
        absl::IsCancelled(input.status())) {
      pump_->Fail(input.status());
      return;
    }
    absl::StatusOr<v1::DispatchRequest> request = absl::InvalidArgumentError(
        "the first DispatchStream message must be a request");
    if (!input.ok()) {
      request = input.status();
    } else if (input->has_request()) {
      request = std::move(*input->mutable_request());
    }
    job_ = StartJob(worker_, gate_.log, std::move(request), pump_, true,
                    gate_.admission.Caller(*context_));
    if (job_ != nullptr) job_->StartInput();
  }

 private:
  Worker& worker_;
  Gate gate_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer first_;
  bool started_ = false;  // the first message was read
  // The job, once started: reads after the first are its stdin. Set before
  // the first of them starts (StartInput).
  std::shared_ptr<StreamJob> job_;
};

// Attach: a job's events again, from offsets.
class AttachReactor final
    : public JobReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>> {
 public:
  AttachReactor(Worker& worker, CallTracker& calls,
                absl::StatusOr<v1::AttachRequest> request,
                const JobCaller& caller)
      : JobReactor(calls) {
    absl::Status s = request.status();
    if (s.ok()) {
      s = AttachTo(worker, request->job_id(), caller,
                   {.stdout_bytes = request->stdout_offset(),
                    .stderr_bytes = request->stderr_offset()},
                   request->take_over() ? JobJournal::Role::kControl
                                        : JobJournal::Role::kFollow,
                   pump_);
    }
    if (!s.ok()) pump_->Fail(s);
  }
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDispatch(
    Worker& worker, CallTracker& calls, LogThrottle& log,
    absl::StatusOr<v1::DispatchRequest> request, const JobCaller& caller) {
  return new DispatchReactor(worker, calls, log, std::move(request), caller);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
StartDispatchStream(Worker& worker, CallTracker& calls, Gate gate,
                    grpc::CallbackServerContext* context) {
  return new DispatchStreamReactor(worker, calls, gate, context);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartAttach(
    Worker& worker, CallTracker& calls,
    absl::StatusOr<v1::AttachRequest> request, const JobCaller& caller) {
  return new AttachReactor(worker, calls, std::move(request), caller);
}

}  // namespace cfdb::worker

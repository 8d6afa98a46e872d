// What every call handler of the server shares: counting calls for the
// shutdown, the gate every call passes first, and the request and reply
// bytes parsed and written by hand, so that a request that does not parse
// is INVALID_ARGUMENT (gRPC's own handlers would answer UNIMPLEMENTED, which
// on Idle reads as "the worker predates this RPC") and a call whose request
// never came is seen (AbuseGuard).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "core/log_throttle.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "rpc/abuse_guard.h"
#include "rpc/admission.h"
#include "rpc/methods.h"

namespace cfdb::worker {

// CallTracker counts the calls not yet done, so shutdown can wait for
// exactly those (e.g. a Stop reply on its way out) and then close every
// connection at once instead of waiting for idle clients to hang up.
// Thread-safe.
class CallTracker {
 public:
  void Started() {
    absl::MutexLock lock(&mu_);
    ++calls_;
  }
  void Done() {
    {
      absl::MutexLock lock(&mu_);
      if (--calls_ > 0) return;
    }
    none_left_.SignalAll();
  }
  // WaitDone waits until no call is left or the monotonic clock reaches
  // `deadline`.
  void WaitDone(TimePoint deadline) {
    absl::MutexLock lock(&mu_);
    none_left_.AwaitUntil(
        mu_, deadline,
        [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ == 0; });
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  CondVar none_left_;
};

// ParseInto parses `bytes` into `message`, reusing what it holds; false
// when they are not one (or there are none).
inline bool ParseInto(const grpc::ByteBuffer& bytes,
                      google::protobuf::Message& message) {
  if (!bytes.Valid()) return false;
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  return reader.status().ok() && message.ParseFromZeroCopyStream(&reader);
}

// Parse reads a request of type T from `bytes`; INVALID_ARGUMENT when they
// are not one (malformed, or a string field that is not UTF-8), CANCELLED
// when no request arrived at all (the stream ended first: gRPC still runs
// the handler of a raw method).
template <typename T>
absl::StatusOr<T> Parse(const grpc::ByteBuffer& bytes) {
  if (!bytes.Valid()) {
    return absl::CancelledError("no request arrived: the client went away");
  }
  T message;
  if (!ParseInto(bytes, message)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a valid ", message.GetTypeName(),
                     " (malformed, or a string that is not UTF-8)"));
  }
  return message;
}

// FinishedUnary finishes a unary call with `status` at once and returns
// its reactor (gRPC's default one).
inline grpc::ServerUnaryReactor* FinishedUnary(
    grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// FinishedWriter returns a server-streaming call's reactor that only
// finishes with `status` (a call refused before it began).
template <typename T>
grpc::ServerWriteReactor<T>* FinishedWriter(const grpc::Status& status) {
  class Finished final : public grpc::ServerWriteReactor<T> {
   public:
    explicit Finished(const grpc::Status& s) { this->Finish(s); }
    void OnDone() override { delete this; }
  };
  return new Finished(status);
}

// Gate is every handler's first step: a call whose request never arrived
// is counted against its connection (AbuseGuard) and goes no further; then
// the caller must be admitted (Admission); then the request must parse.
// `log` is the server's throttle of the lines a client can cause.
struct Gate {
  Admission& admission;
  AbuseGuard& guard;
  LogThrottle& log;

  // Open returns the request of a call of `method` (methods.h), or why the
  // call goes no further: CANCELLED (no request came), PERMISSION_DENIED,
  // INVALID_ARGUMENT (it does not parse).
  template <typename T>
  absl::StatusOr<T> Open(const grpc::CallbackServerContext& context,
                         const grpc::ByteBuffer& bytes, const Method& method) {
    absl::StatusOr<T> request = Parse<T>(bytes);
    if (absl::IsCancelled(request.status())) {
      guard.ResetBeforeRequest(context.peer());
      return request;
    }
    if (absl::Status s = admission.Admit(context, method.group(), method.name);
        !s.ok()) {
      return s;
    }
    return request;
  }
};

// LogRefused logs a call of `method` refused for its request (`what` names
// it: "stop rpc", "job <escaped id>"), through the throttle: one line per
// method and status code per period, with a count, as refusals come in
// floods from retrying clients or hostile ones. A call whose client left
// before its request arrived is not a refusal worth a line.
inline void LogRefused(LogThrottle& log, std::string_view method,
                       std::string_view what, const absl::Status& status,
                       std::vector<LogField> fields = {}) {
  if (absl::IsCancelled(status)) return;
  const std::string code = absl::StatusCodeToString(status.code());
  fields.emplace_back("grpc_code", code);
  log.Log(absl::StrCat(std::string(method), " refused ", code),
          spdlog::level::info,
          absl::StrCat(std::string(what), ": refused: ", status.ToString()),
          std::move(fields));
}

// Serialize writes `message` into `bytes`, replacing what it held.
inline void Serialize(const google::protobuf::Message& message,
                      grpc::ByteBuffer* bytes) {
  bytes->Clear();
  bool own = false;
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(
      message, bytes, &own);
}

}  // namespace cfdb::worker

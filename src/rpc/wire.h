// Translation between the wire contract (worker.pb.h) and the library's
// types. Protos stay in the rpc layer (src/rpc/): its calls, the server and
// the connection translate through these functions.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/job_journal.h"
#include "cfdb/worker/limits.h"
#include "cfdb/worker/v1/worker.pb.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker::wire {

namespace v1 = ::cfdb::worker::v1;

// FromProto converts a request, with its ExecSpec in `spec` when it has one;
// INVALID_ARGUMENT for a NaN, infinite or negative time limit. Other checks
// are Worker::Validate's.
absl::StatusOr<JobRequest> FromProto(const v1::DispatchRequest& request);
v1::DispatchRequest ToProto(const JobRequest& request);

v1::DispatchEvent OutputEvent(OutputStream stream, std::string_view data);
v1::DispatchEvent OutcomeEvent(const JobOutcome& outcome);
v1::DispatchEvent AttachedEvent(const JobJournal::Attachment& attachment);
// SerializeOutput writes the DispatchEvent of `chunk` into `bytes` without
// copying its data: the message's data is a slice of the chunk's buffer,
// which the slice keeps alive until gRPC has sent it.
void SerializeOutput(const JobJournal::Chunk& chunk, grpc::ByteBuffer* bytes);

// SetOutcome sets the `exit` or `failure` of `message` (a DispatchEvent,
// JobInfo or CancelReply) from `outcome`.
void SetOutcome(const JobOutcome& outcome, v1::Exit* exit,
                v1::Failure* failure);
template <typename Message>
void SetOutcome(const JobOutcome& outcome, Message& message) {
  SetOutcome(outcome,
             outcome.kind == JobOutcome::Kind::kFailed ? nullptr
                                                       : message.mutable_exit(),
             outcome.kind == JobOutcome::Kind::kFailed
                 ? message.mutable_failure()
                 : nullptr);
}
// OutcomeOf reads an outcome from the `exit` or `failure` of a message
// (null when it has none); nullopt when it has neither, or an `exit` with
// neither code nor signal, which is a protocol error, never code 0.
std::optional<JobOutcome> OutcomeOf(const v1::Exit* exit,
                                    const v1::Failure* failure);
template <typename Message>
std::optional<JobOutcome> OutcomeOf(const Message& message) {
  return OutcomeOf(message.has_exit() ? &message.exit() : nullptr,
                   message.has_failure() ? &message.failure() : nullptr);
}

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const Credentials& credentials);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const Credentials& credentials);
// SetChannelArguments sets message limits, a fixed receive window
// (kClientReceiveWindowBytes), keepalive pings (kClientKeepaliveTime,
// kClientKeepaliveTimeout) and, for mutual TLS with an identity, the name
// the worker's certificate is verified against.
void SetChannelArguments(const Credentials& credentials,
                         grpc::ChannelArguments& args);

}  // namespace cfdb::worker::wire

// Translation between the wire contract (worker.pb.h) and the library's
// types. The only place, with server.cc and connection.cc, that sees protos.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/v1/worker.pb.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker::wire {

namespace v1 = ::cfdb::worker::v1;

// kMaxMessageBytes bounds one message either way (a request carries stdin).
inline constexpr int kMaxMessageBytes = 64 << 20;

// FromProto converts a request, with its ExecSpec in `spec` when it has one;
// INVALID_ARGUMENT for a NaN, infinite or negative time limit. Other checks
// are Worker::Validate's.
absl::StatusOr<JobRequest> FromProto(const v1::DispatchRequest& request);
v1::DispatchRequest ToProto(const JobRequest& request);

v1::DispatchEvent OutputEvent(OutputStream stream, std::string_view data);
v1::DispatchEvent OutcomeEvent(const JobOutcome& outcome);
// OutcomeFromEvent converts a terminal event; nullopt for any other event.
std::optional<JobOutcome> OutcomeFromEvent(const v1::DispatchEvent& event);

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const Credentials& credentials);
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const Credentials& credentials);
// SetChannelArguments sets message limits and, for mutual TLS with an
// identity, the name the worker's certificate is verified against.
void SetChannelArguments(const Credentials& credentials,
                         grpc::ChannelArguments& args);

}  // namespace cfdb::worker::wire

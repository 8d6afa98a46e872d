#include "rpc/wire.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cfdb/worker/drain.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "rpc/san_match.h"

namespace cfdb::worker::wire {

absl::StatusOr<JobRequest> FromProto(const v1::DispatchRequest& request) {
  JobRequest out;
  out.job_id = request.job_id();
  out.kind = request.kind();
  out.payload = request.payload();
  const double detach = request.detach_grace_seconds();
  if (std::isnan(detach)) {
    return absl::InvalidArgumentError("detach_grace_seconds: NaN");
  }
  out.detach_grace = GraceFromSeconds(detach);
  out.drop_oldest = request.output_overflow() ==
                    v1::DispatchRequest::OUTPUT_OVERFLOW_DROP_OLDEST;
  if (!request.has_exec()) return out;
  const v1::ExecSpec& from = request.exec();
  const double limit = from.time_limit_seconds();
  if (!std::isfinite(limit) || limit < 0) {
    return absl::InvalidArgumentError(
        "exec.time_limit_seconds: must be a finite number >= 0");
  }
  ExecSpec& exec = MutableExec(out);
  exec.argv.assign(from.argv().begin(), from.argv().end());
  if (!exec.argv.empty()) out.program = exec.argv.front();
  exec.env.insert(from.env().begin(), from.env().end());
  exec.cwd = from.cwd();
  exec.stdin_data = from.stdin();
  exec.time_limit = ToDuration(Seconds(limit));
  return out;
}

v1::DispatchRequest ToProto(const JobRequest& request) {
  v1::DispatchRequest out;
  out.set_job_id(request.job_id);
  out.set_kind(request.kind);
  out.set_payload(request.payload);
  out.set_detach_grace_seconds(request.detach_grace < Duration::zero()
                                   ? -1
                                   : ToSeconds(request.detach_grace));
  if (request.drop_oldest) {
    out.set_output_overflow(v1::DispatchRequest::OUTPUT_OVERFLOW_DROP_OLDEST);
  }
  out.set_attach_if_exists(request.attach_if_exists);
  if (const ExecSpec* from = FindExec(request)) {
    v1::ExecSpec* exec = out.mutable_exec();
    for (const std::string& arg : from->argv) exec->add_argv(arg);
    exec->mutable_env()->insert(from->env.begin(), from->env.end());
    exec->set_cwd(from->cwd);
    exec->set_stdin(from->stdin_data);
    exec->set_time_limit_seconds(ToSeconds(from->time_limit));
  }
  return out;
}

v1::DispatchEvent OutputEvent(OutputStream stream, std::string_view data) {
  v1::DispatchEvent event;
  v1::Output* output = event.mutable_output();
  output->set_stream(stream == OutputStream::kStdout ? v1::Output::STDOUT
                                                     : v1::Output::STDERR);
  output->set_data(data.data(), data.size());
  return event;
}

namespace {

v1::Failure::Reason ToProto(JobOutcome::Failure failure) {
  using F = JobOutcome::Failure;
  switch (failure) {
    case F::kStartFailed:
      return v1::Failure::START_FAILED;
    case F::kCancelled:
      return v1::Failure::CANCELLED;
    case F::kTimeLimitExceeded:
      return v1::Failure::TIME_LIMIT_EXCEEDED;
    case F::kHandlerError:
      return v1::Failure::HANDLER_ERROR;
    case F::kNone:
      break;
  }
  return v1::Failure::REASON_UNSPECIFIED;
}

JobOutcome::Failure FromProto(v1::Failure::Reason reason) {
  using F = JobOutcome::Failure;
  switch (reason) {
    case v1::Failure::START_FAILED:
      return F::kStartFailed;
    case v1::Failure::CANCELLED:
      return F::kCancelled;
    case v1::Failure::TIME_LIMIT_EXCEEDED:
      return F::kTimeLimitExceeded;
    default:
      return F::kHandlerError;
  }
}

}  // namespace

void SetOutcome(const JobOutcome& outcome, v1::Exit* exit,
                v1::Failure* failure) {
  switch (outcome.kind) {
    case JobOutcome::Kind::kExited:
      exit->set_code(outcome.code);
      break;
    case JobOutcome::Kind::kSignaled:
      exit->set_signal(outcome.signal);
      break;
    case JobOutcome::Kind::kFailed:
      failure->set_reason(ToProto(outcome.failure));
      failure->set_message(outcome.message);
      break;
  }
}

v1::DispatchEvent OutcomeEvent(const JobOutcome& outcome) {
  v1::DispatchEvent event;
  SetOutcome(outcome, event);
  return event;
}

v1::DispatchEvent AttachedEvent(const JobJournal::Attachment& attachment) {
  v1::DispatchEvent event;
  v1::Attached* attached = event.mutable_attached();
  attached->set_ended(attachment.ended);
  attached->set_stdout_offset(attachment.from.stdout_bytes);
  attached->set_stderr_offset(attachment.from.stderr_bytes);
  attached->set_stdout_lost_bytes(attachment.lost.stdout_bytes);
  attached->set_stderr_lost_bytes(attachment.lost.stderr_bytes);
  return event;
}

std::optional<JobOutcome> OutcomeOf(const v1::Exit* exit,
                                    const v1::Failure* failure) {
  if (exit != nullptr) {
    switch (exit->status_case()) {
      case v1::Exit::kCode:
        return JobOutcome::Exited(exit->code());
      case v1::Exit::kSignal:
        return JobOutcome::Signaled(exit->signal());
      case v1::Exit::STATUS_NOT_SET:
        return std::nullopt;
    }
  }
  if (failure != nullptr) {
    return JobOutcome::Failed(FromProto(failure->reason()), failure->message());
  }
  return std::nullopt;
}

namespace {

// Appends `value` as a varint; returns the new end.
uint8_t* Varint(uint64_t value, uint8_t* at) {
  return google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(value,
                                                                       at);
}

constexpr uint32_t Tag(int field, int wire_type) {
  return (static_cast<uint32_t>(field) << 3) | static_cast<uint32_t>(wire_type);
}
constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;

}  // namespace

void SerializeOutput(const JobJournal::Chunk& chunk, grpc::ByteBuffer* bytes) {
  // DispatchEvent{output: Output{stream, offset, lost_bytes, data}} by
  // hand, the data last, so that it goes as a slice of its own.
  uint8_t inner[48];
  uint8_t* at = inner;
  at = Varint(Tag(v1::Output::kStreamFieldNumber, kVarint), at);
  at = Varint(chunk.stream == OutputStream::kStdout ? v1::Output::STDOUT
                                                    : v1::Output::STDERR,
              at);
  at = Varint(Tag(v1::Output::kOffsetFieldNumber, kVarint), at);
  at = Varint(chunk.offset, at);
  if (chunk.lost > 0) {
    at = Varint(Tag(v1::Output::kLostBytesFieldNumber, kVarint), at);
    at = Varint(chunk.lost, at);
  }
  at = Varint(Tag(v1::Output::kDataFieldNumber, kLengthDelimited), at);
  at = Varint(chunk.size, at);
  const size_t inner_size = static_cast<size_t>(at - inner) + chunk.size;
  uint8_t head[64];
  uint8_t* end = Varint(
      Tag(v1::DispatchEvent::kOutputFieldNumber, kLengthDelimited), head);
  end = Varint(inner_size, end);
  std::copy(inner, at, end);
  end += at - inner;
  auto* keep = new std::shared_ptr<const std::string>(chunk.buffer);
  const grpc::Slice slices[2] = {
      grpc::Slice(head, static_cast<size_t>(end - head)),
      grpc::Slice(
          const_cast<char*>(chunk.buffer->data()) + chunk.begin, chunk.size,
          [](void* kept) {
            delete static_cast<std::shared_ptr<const std::string>*>(kept);
          },
          keep)};
  *bytes = grpc::ByteBuffer(slices, 2);
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

namespace {

// CertificateProvider watches the PEM files of `credentials`, re-reading
// them every refresh interval (gRPC's FileWatcherCertificateProvider).
std::shared_ptr<grpc::experimental::CertificateProviderInterface>
CertificateProvider(const Credentials& credentials) {
  if (!credentials.key_pem.empty()) {
    return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
        credentials.ca_pem,
        std::vector<grpc::experimental::IdentityKeyCertPair>{
            {.private_key = credentials.key_pem,
             .certificate_chain = credentials.cert_pem}});
  }
  const auto refresh = std::chrono::duration_cast<std::chrono::seconds>(
      credentials.refresh_interval);
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      credentials.key_file, credentials.cert_file, credentials.ca_file,
      static_cast<unsigned>(std::max<int64_t>(refresh.count(), 1)));
}

// SanVerifier checks the worker's certificate against the name the client
// expects (the --tls-identity, else the dialled host) by SANs only: gRPC's
// own host name check would fall back to the Common Name.
class SanVerifier final
    : public grpc::experimental::ExternalCertificateVerifier {
 public:
  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    auto strings = [](const std::vector<grpc::string_ref>& refs) {
      std::vector<std::string> out;
      out.reserve(refs.size());
      for (const grpc::string_ref& r : refs)
        out.emplace_back(r.data(), r.size());
      return out;
    };
    const grpc::string_ref target = request->target_name();
    const std::string problem = IdentityProblem(
        HostOf(std::string_view(target.data(), target.size())),
        strings(request->dns_names()), strings(request->ip_names()));
    *sync_status =
        problem.empty()
            ? grpc::Status::OK
            : grpc::Status(grpc::StatusCode::UNAUTHENTICATED, problem);
    return true;
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {
  }
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const Credentials& credentials) {
  if (credentials.kind == Credentials::Kind::kInsecure) {
    return grpc::InsecureServerCredentials();
  }
  grpc::experimental::TlsServerCredentialsOptions options(
      CertificateProvider(credentials));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!credentials.crl_directory.empty()) {
    options.set_crl_directory(credentials.crl_directory);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const Credentials& credentials) {
  if (credentials.kind == Credentials::Kind::kInsecure) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(CertificateProvider(credentials));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  // The identity by SANs only (SanVerifier), so gRPC's per-call host check
  // with its Common Name fallback is off.
  options.set_certificate_verifier(
      grpc::experimental::ExternalCertificateVerifier::Create<SanVerifier>());
  options.set_check_call_host(false);
  if (!credentials.crl_directory.empty()) {
    options.set_crl_directory(credentials.crl_directory);
  }
  return grpc::experimental::TlsCredentials(options);
}

void SetChannelArguments(const Credentials& credentials,
                         grpc::ChannelArguments& args) {
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // A fixed receive window: what a lagging reader makes the client hold.
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kClientReceiveWindowBytes);
  // Keepalive (limits.h): a dead or silent connection ends its calls. Our
  // workers take pings this often without a strike (server.h).
  static_assert(kClientKeepaliveTime >= kMinClientPingInterval);
  using std::chrono::milliseconds;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(milliseconds(kClientKeepaliveTime).count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(milliseconds(kClientKeepaliveTimeout).count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Verify the worker by its fixed identity, not the address it has today.
  if (credentials.kind == Credentials::Kind::kMutualTls &&
      !credentials.identity.empty()) {
    args.SetSslTargetNameOverride(credentials.identity);
  }
}

}  // namespace cfdb::worker::wire

#include "cfdb/worker/connection.h"

#include <grpc/support/time.h>

#include <algorithm>
#include <iterator>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rpc/stdin_pump.h"
#include "rpc/unix_socket.h"
#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

namespace v1 = ::cfdb::worker::v1;

// ChannelPool shares one channel per (target, credentials) across the
// process while any connection holds it.
class ChannelPool {
 public:
  static ChannelPool& Get() {
    static ChannelPool* pool = new ChannelPool;  // never destroyed
    return *pool;
  }

  std::shared_ptr<grpc::Channel> Acquire(const std::string& target,
                                         const Credentials& credentials) {
    const std::string key = absl::StrCat(target, "\n", credentials.Key());
    absl::MutexLock lock(&mu_);
    if (std::shared_ptr<grpc::Channel> channel = channels_[key].lock()) {
      return channel;
    }
    // Entries no connection holds any more go, so a client of many workers
    // (a fleet reaper) keeps only what it uses.
    auto expired = [](const auto& entry) { return entry.second.expired(); };
    absl::erase_if(channels_, expired);
    absl::erase_if(channel_credentials_, expired);
    // One set of channel credentials per set of files while any connection
    // uses it: a client of many workers (a fleet reaper) then reads and
    // watches the files once, not once per worker with a watcher thread
    // each. It goes with the last connection (a watcher left running would
    // outlive gRPC at exit).
    std::weak_ptr<grpc::ChannelCredentials>& entry =
        channel_credentials_[credentials.Key()];
    std::shared_ptr<grpc::ChannelCredentials> shared = entry.lock();
    if (shared == nullptr) {
      shared = wire::ChannelCredentials(credentials);
      entry = shared;
    }
    // The channel as connections hold it: with the credentials.
    struct Held {
      std::shared_ptr<grpc::ChannelCredentials> credentials;
      std::shared_ptr<grpc::Channel> channel;  // released first
    };
    auto held = std::make_shared<Held>(Held{
        shared,
        NewChannel(target, credentials, shared, /*own_connection=*/false)});
    std::shared_ptr<grpc::Channel> channel(held, held->channel.get());
    channels_[key] = channel;
    return channel;
  }

  // NewChannel makes a channel; with `own_connection`, one that shares no
  // connection with any other (a subchannel pool of its own).
  static std::shared_ptr<grpc::Channel> NewChannel(
      const std::string& target, const Credentials& credentials,
      const std::shared_ptr<grpc::ChannelCredentials>& channel_credentials,
      bool own_connection) {
    grpc::ChannelArguments args;
    wire::SetChannelArguments(credentials, args);
    if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(target, channel_credentials, args);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::weak_ptr<grpc::ChannelCredentials>>
      channel_credentials_ ABSL_GUARDED_BY(mu_);
};

void SetTimeout(grpc::ClientContext& context, Duration timeout) {
  // On gRPC's monotonic clock, so a wall-clock step cannot move it.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::min(timeout, ToDuration(Seconds(1e9))));
  context.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_nanos(ns.count(), GPR_TIMESPAN)));
}

absl::Status CheckTimeout(Duration timeout, std::string_view what) {
  if (timeout <= Duration::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": timeout must be positive"));
  }
  return absl::OkStatus();
}

// CheckRequestSize refuses a request over the message limit here, once and
// for good, rather than letting gRPC answer RESOURCE_EXHAUSTED, which reads
// like "retry later".
absl::Status CheckRequestSize(const v1::DispatchRequest& message) {
  if (const size_t bytes = message.ByteSizeLong(); bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request is ", bytes, " bytes, more than the limit of ",
        kMaxMessageBytes,
        " bytes (stdin in the request counts; stream it instead)"));
  }
  return absl::OkStatus();
}

}  // namespace

class WorkerConnection::Impl {
 public:
  // Stubs are what a call uses; a call holds them until it returns, so Close
  // never pulls them from under a call in progress.
  struct Stubs {
    explicit Stubs(std::shared_ptr<grpc::Channel> channel)
        : channel(std::move(channel)),
          worker(v1::Worker::NewStub(this->channel)),
          health(grpc::health::v1::Health::NewStub(this->channel)) {}
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Worker::Stub> worker;
    std::unique_ptr<grpc::health::v1::Health::Stub> health;
  };

  explicit Impl(std::shared_ptr<grpc::Channel> channel)
      : stubs_(std::make_shared<Stubs>(std::move(channel))) {}

  // stubs returns the stubs, or FAILED_PRECONDITION after Close.
  absl::StatusOr<std::shared_ptr<const Stubs>> stubs() {
    absl::MutexLock lock(&mu_);
    if (stubs_ == nullptr) {
      return absl::FailedPreconditionError("connection is closed");
    }
    return stubs_;
  }

  // Begin is every call's preamble: a positive `timeout` (if any) becomes
  // the call's deadline on `context`; INVALID_ARGUMENT for another, and
  // FAILED_PRECONDITION after Close, without a call.
  absl::StatusOr<std::shared_ptr<const Stubs>> Begin(
      std::optional<Duration> timeout, std::string_view what,
      grpc::ClientContext& context) {
    if (timeout) {
      if (absl::Status s = CheckTimeout(*timeout, what); !s.ok()) return s;
      SetTimeout(context, *timeout);
    }
    return stubs();
  }

  using EventReader = grpc::ClientReader<v1::DispatchEvent>;
  // StartDispatch begins a Dispatch call of `request` on `context` (Begin,
  // then the request's size check): its reader, or why no call started.
  absl::StatusOr<std::unique_ptr<EventReader>> StartDispatch(
      const JobRequest& request, std::optional<Duration> timeout,
      grpc::ClientContext& context) {
    auto stubs = Begin(timeout, "dispatch", context);
    if (!stubs.ok()) return stubs.status();
    const v1::DispatchRequest message = wire::ToProto(request);
    if (absl::Status s = CheckRequestSize(message); !s.ok()) return s;
    return (*stubs)->worker->Dispatch(&context, message);
  }

  absl::Status Close() {
    absl::MutexLock lock(&mu_);
    if (stubs_ == nullptr) {
      return absl::FailedPreconditionError("connection is already closed");
    }
    stubs_.reset();
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<const Stubs> stubs_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<WorkerConnection>> WorkerConnection::Open(
    std::string target, Credentials credentials, ConnectionOptions options) {
  if (target.empty()) {
    return absl::InvalidArgumentError("worker address is empty");
  }
  if (IsUnixTarget(target)) credentials = Credentials::Insecure();
  auto impl = std::make_unique<Impl>(
      options.own_connection
          ? ChannelPool::NewChannel(target, credentials,
                                    wire::ChannelCredentials(credentials),
                                    /*own_connection=*/true)
          : ChannelPool::Get().Acquire(target, credentials));
  return std::unique_ptr<WorkerConnection>(new WorkerConnection(
      std::move(target), std::move(credentials), std::move(impl)));
}

WorkerConnection::WorkerConnection(std::string target, Credentials credentials,
                                   std::unique_ptr<Impl> impl)
    : target_(std::move(target)),
      credentials_(std::move(credentials)),
      impl_(std::move(impl)) {}

WorkerConnection::~WorkerConnection() = default;

absl::StatusOr<double> WorkerConnection::IdleTime(Duration timeout) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "idle", context);
  if (!stubs.ok()) return stubs.status();
  v1::IdleTime reply;
  grpc::Status status =
      (*stubs)->worker->Idle(&context, v1::IdleRequest(), &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  return reply.seconds();
}

absl::StatusOr<StopSummary> WorkerConnection::Stop(
    Duration grace, Duration timeout, std::optional<Duration> if_idle_for) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "stop", context);
  if (!stubs.ok()) return stubs.status();
  v1::StopRequest request;
  request.set_grace_seconds(grace < Duration::zero() ? -1 : ToSeconds(grace));
  if (if_idle_for) {
    request.set_if_idle_for_seconds(
        ToSeconds(std::max(*if_idle_for, Duration::zero())));
  }
  v1::StopReply reply;
  grpc::Status status = (*stubs)->worker->Stop(&context, request, &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  return StopSummary{reply.drained(), reply.cancelled()};
}

namespace {

// EventsRead is what a job's event stream said.
struct EventsRead {
  std::optional<JobOutcome> outcome;
  bool accepted = false;
};

// ReadEvents reads a Dispatch or DispatchStream stream to its end, calling
// `callbacks` and, for DispatchStream, `on_accepted` and `on_input_closed`.
template <typename Stream>
EventsRead ReadEvents(Stream& stream, const DispatchCallbacks& callbacks,
                      const std::function<void()>& on_accepted = {},
                      const std::function<void()>& on_input_closed = {}) {
  EventsRead read;
  v1::DispatchEvent event;
  while (stream.Read(&event)) {
    if (event.has_accepted()) {
      read.accepted = true;
      if (on_accepted) on_accepted();
      if (callbacks.on_accepted) callbacks.on_accepted();
    } else if (event.has_attached()) {
      // The job exists already: it takes no input from this call.
      read.accepted = true;
      if (on_input_closed) on_input_closed();
      if (callbacks.on_attached) {
        const v1::Attached& a = event.attached();
        callbacks.on_attached(JobJournal::Attachment{
            .from = {a.stdout_offset(), a.stderr_offset()},
            .lost = {a.stdout_lost_bytes(), a.stderr_lost_bytes()},
            .ended = a.ended()});
      }
    } else if (event.has_output()) {
      const OutputStream of = event.output().stream() == v1::Output::STDERR
                                  ? OutputStream::kStderr
                                  : OutputStream::kStdout;
      if (event.output().lost_bytes() > 0 && callbacks.on_lost) {
        callbacks.on_lost(of, event.output().lost_bytes());
      }
      if (callbacks.on_output) callbacks.on_output(of, event.output().data());
    } else if (event.has_input_closed()) {
      if (on_input_closed) on_input_closed();
    } else if (!read.outcome) {
      read.outcome = wire::OutcomeOf(event);
    }
  }
  return read;
}

// Conclude turns what a stream said and its status into Dispatch's result.
absl::StatusOr<JobOutcome> Conclude(const EventsRead& read,
                                    const grpc::Status& status,
                                    absl::Status input_error = {}) {
  // A read error cut the input short and cancelled the job: say so,
  // rather than the cancellation it caused.
  if (read.outcome && input_error.ok()) return *read.outcome;
  absl::Status failure =
      !input_error.ok() ? std::move(input_error)
      : status.ok()     ? absl::DataLossError(
                              "the worker closed the stream without an outcome")
                    : wire::FromGrpc(status);
  // After acceptance the job has started: say so in the status itself, so
  // that no caller mistakes the failure for "not started" (errors.h).
  return read.accepted ? MarkAccepted(std::move(failure)) : failure;
}

}  // namespace

absl::StatusOr<JobOutcome> WorkerConnection::Dispatch(
    const JobRequest& request, const DispatchCallbacks& callbacks,
    std::optional<Duration> timeout) {
  grpc::ClientContext context;
  auto reader = impl_->StartDispatch(request, timeout, context);
  if (!reader.ok()) return reader.status();
  const EventsRead read = ReadEvents(**reader, callbacks);
  return Conclude(read, (*reader)->Finish());
}

absl::StatusOr<StreamOffsets> WorkerConnection::Submit(
    const JobRequest& request, std::optional<Duration> timeout) {
  if (request.detach_grace == Duration::zero()) {
    return absl::InvalidArgumentError(
        "detach_grace: a submitted job needs a non-zero detach grace (0 "
        "would cancel it as the call ends)");
  }
  grpc::ClientContext context;
  auto reader = impl_->StartDispatch(request, timeout, context);
  if (!reader.ok()) return reader.status();
  v1::DispatchEvent event;
  if ((*reader)->Read(&event) &&
      (event.has_accepted() || event.has_attached())) {
    // Accepted: the call ends here, and the job runs on detached.
    context.TryCancel();
    (void)(*reader)->Finish();
    return StreamOffsets{};
  }
  const grpc::Status status = (*reader)->Finish();
  if (!status.ok()) return wire::FromGrpc(status);
  return absl::DataLossError(
      "the worker's Dispatch stream began without `accepted`");
}

absl::StatusOr<JobOutcome> WorkerConnection::DispatchStream(
    const JobRequest& request, int stdin_fd, const DispatchCallbacks& callbacks,
    std::optional<Duration> timeout) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "dispatch", context);
  if (!stubs.ok()) return stubs.status();
  v1::DispatchInput first;
  *first.mutable_request() = wire::ToProto(request);
  if (absl::Status s = CheckRequestSize(first.request()); !s.ok()) return s;
  std::unique_ptr<StdinPump::Stream> stream =
      (*stubs)->worker->DispatchStream(&context);
  StdinPump pump(stdin_fd, *stream, context);
  EventsRead read;
  if (stream->Write(first)) {
    // Input is read only once the job is accepted, so a refused call (which
    // a caller may retry) has consumed none of it.
    read = ReadEvents(
        *stream, callbacks, [&pump] { pump.Start(); },
        [&pump] { pump.Stop(); });
  }
  pump.Stop();
  pump.Join();
  return Conclude(read, stream->Finish(), pump.error());
}

absl::StatusOr<JobOutcome> WorkerConnection::Attach(
    const std::string& job_id, StreamOffsets from,
    const DispatchCallbacks& callbacks, std::optional<Duration> timeout,
    JobJournal::Role role) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "attach", context);
  if (!stubs.ok()) return stubs.status();
  v1::AttachRequest request;
  request.set_job_id(job_id);
  request.set_stdout_offset(from.stdout_bytes);
  request.set_stderr_offset(from.stderr_bytes);
  request.set_take_over(role == JobJournal::Role::kControl);
  std::unique_ptr<grpc::ClientReader<v1::DispatchEvent>> reader =
      (*stubs)->worker->Attach(&context, request);
  const EventsRead read = ReadEvents(*reader, callbacks);
  return Conclude(read, reader->Finish());
}

namespace {

// JobInfoOf is one job as the worker reported it (ListJobs).
JobInfo JobInfoOf(const v1::JobInfo& from) {
  JobInfo job;
  job.job_id = from.job_id();
  job.kind = from.kind();
  job.client = from.client();
  job.program = from.program();
  job.running = from.state() == v1::JobInfo::RUNNING;
  job.attached = from.attached();
  job.readers = from.readers();
  job.started = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          Seconds(from.started_unix_seconds())));
  job.running_for = ToDuration(Seconds(from.running_seconds()));
  job.retained_bytes = from.retained_bytes();
  job.dropped_bytes = from.dropped_bytes();
  job.written = {from.stdout_bytes(), from.stderr_bytes()};
  job.detach_grace = GraceFromSeconds(from.detach_grace_seconds());
  job.outcome = wire::OutcomeOf(from);
  return job;
}

}  // namespace

absl::StatusOr<JobsPage> WorkerConnection::ListJobsPage(
    uint32_t page_size, const std::string& page_token, Duration timeout) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "jobs", context);
  if (!stubs.ok()) return stubs.status();
  v1::ListJobsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(page_token);
  v1::ListJobsReply reply;
  grpc::Status status = (*stubs)->worker->ListJobs(&context, request, &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  JobsPage page{.next_page_token = reply.next_page_token(),
                .others_running = reply.others_running(),
                .others_ended = reply.others_ended()};
  page.jobs.reserve(static_cast<size_t>(reply.jobs_size()));
  for (const v1::JobInfo& from : reply.jobs()) {
    page.jobs.push_back(JobInfoOf(from));
  }
  return page;
}

absl::StatusOr<std::vector<JobInfo>> WorkerConnection::ListJobs(
    Duration timeout) {
  std::vector<JobInfo> jobs;
  std::string token;
  do {
    absl::StatusOr<JobsPage> page = ListJobsPage(0, token, timeout);
    if (!page.ok()) return page.status();
    std::move(page->jobs.begin(), page->jobs.end(), std::back_inserter(jobs));
    token = std::move(page->next_page_token);
  } while (!token.empty());
  return jobs;
}

absl::StatusOr<WorkerState> WorkerConnection::GetStatus(Duration timeout) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "status", context);
  if (!stubs.ok()) return stubs.status();
  v1::StatusReply reply;
  grpc::Status status =
      (*stubs)->worker->Status(&context, v1::StatusRequest(), &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  return WorkerState{
      .version = reply.version(),
      .uptime_seconds = reply.uptime_seconds(),
      .idle_seconds = reply.idle_seconds(),
      .jobs_in_flight = reply.jobs_in_flight(),
      .max_concurrent_jobs = reply.max_concurrent_jobs(),
      .job_ids = {reply.job_ids().begin(), reply.job_ids().end()},
      .other_jobs_in_flight = reply.other_jobs_in_flight(),
      .jobs_retained = reply.jobs_retained(),
      .draining = reply.draining(),
      .retires_at_unix_seconds = reply.retires_at_unix_seconds(),
      .retirement_rule = reply.retirement_rule(),
      .scale_in_protected = reply.scale_in_protected(),
      .identity = reply.identity()};
}

absl::StatusOr<JobOutcome> WorkerConnection::Cancel(const std::string& job_id,
                                                    Duration grace,
                                                    Duration timeout) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "cancel", context);
  if (!stubs.ok()) return stubs.status();
  v1::CancelRequest request;
  request.set_job_id(job_id);
  request.set_grace_seconds(ToSeconds(std::max(grace, Duration::zero())));
  v1::CancelReply reply;
  grpc::Status status = (*stubs)->worker->Cancel(&context, request, &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  std::optional<JobOutcome> outcome = wire::OutcomeOf(reply);
  if (!outcome) {
    return absl::DataLossError("the worker's Cancel reply has no outcome");
  }
  return *outcome;
}

absl::StatusOr<WorkerConnection::ServingStatus> WorkerConnection::Health(
    Duration timeout, const std::string& service) {
  grpc::ClientContext context;
  auto stubs = impl_->Begin(timeout, "health", context);
  if (!stubs.ok()) return stubs.status();
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse reply;
  grpc::Status status = (*stubs)->health->Check(&context, request, &reply);
  if (!status.ok()) return wire::FromGrpc(status);
  switch (reply.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return ServingStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return ServingStatus::kNotServing;
    default:
      return ServingStatus::kUnknown;
  }
}

absl::Status WorkerConnection::Close() { return impl_->Close(); }

}  // namespace cfdb::worker

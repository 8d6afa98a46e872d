// WorkerConnection: the one client surface for talking to a single worker by
// address. Callers never touch the generated stub or build channels.
//
//   auto conn = WorkerConnection::Open("127.0.0.1:50051");
//   if (!conn.ok()) ...;
//   absl::StatusOr<double> idle = (*conn)->IdleTime(std::chrono::seconds(5));
//   if (!idle.ok()) switch (ClassifyError(Rpc::kIdle, idle.status())) ...
//
// Errors are returned as absl::Status carrying the gRPC code and message;
// ClassifyError (errors.h) tells what they mean. Nothing here throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/job_journal.h"
#include "cfdb/worker/limits.h"

namespace cfdb::worker {

// DispatchCallbacks run on the thread that called Dispatch (or Attach), in
// the order the events arrived, before it returns.
struct DispatchCallbacks {
  // Called once when the worker accepted the job.
  std::function<void()> on_accepted;
  // Called once instead of on_accepted when the call attached to a job
  // (Attach, or a Dispatch with attach_if_exists whose job existed): where
  // its output resumes, and the bytes from the offsets asked for that it
  // will not get.
  std::function<void(const JobJournal::Attachment&)> on_attached;
  // Called for each output chunk, in order. Chunks of a stream follow each
  // other without gap (unless on_attached or on_lost said some were lost),
  // so a caller that counts them knows the offsets to attach again from.
  std::function<void(OutputStream, std::string_view)> on_output;
  // Called before a chunk when bytes of its stream before it will not come
  // (Output.lost_bytes: a follower fell behind the job's buffer, or output
  // was dropped), with their number.
  std::function<void(OutputStream, uint64_t)> on_lost;
};

// JobInfo is one job as ListJobs reports it (cfdb.worker.v1.JobInfo).
struct JobInfo {
  std::string job_id;
  std::string kind;
  std::string client;   // who dispatched it: a SAN, "plaintext", ...
  std::string program;  // argv[0] of an exec job
  bool running = false;
  bool attached = false;                          // a call reads it
  uint32_t readers = 0;                           // calls reading it
  std::chrono::system_clock::time_point started;  // wall clock
  Duration running_for{};                         // monotonic
  uint64_t retained_bytes = 0;
  uint64_t dropped_bytes = 0;
  StreamOffsets written;  // bytes written per stream
  Duration detach_grace{};
  std::optional<JobOutcome> outcome;  // once ended
};

// JobsPage is one page of ListJobs.
struct JobsPage {
  std::vector<JobInfo> jobs;
  std::string next_page_token;  // empty on the last page
  // Jobs of other identities the caller may not see, in all.
  uint32_t others_running = 0;
  uint32_t others_ended = 0;
};

// WorkerState is a worker's answer to Status (worker.proto's StatusReply
// says what each field means).
struct WorkerState {
  std::string version;
  double uptime_seconds = 0;
  double idle_seconds = 0;
  uint32_t jobs_in_flight = 0;
  uint32_t max_concurrent_jobs = 0;
  std::vector<std::string> job_ids;  // the caller's own, at most 100
  uint32_t other_jobs_in_flight = 0;
  uint32_t jobs_retained = 0;
  bool draining = false;
  // Unix seconds and "idle" or "max_lifetime"; 0 and "" for neither.
  double retires_at_unix_seconds = 0;
  std::string retirement_rule;
  bool scale_in_protected = false;
  std::string identity;
};

// ConnectionOptions tune one WorkerConnection.
struct ConnectionOptions {
  // A channel of its own, sharing no TCP connection with any other: its
  // first call dials anew, and the connection closes with it. For proving
  // that a worker still accepts new connections (the self-poll's fresh
  // dials); everything else should share the pooled channel.
  bool own_connection = false;
};

// WorkerConnection talks to one worker. Channels are pooled process-wide by
// (target, credentials): connections to the same worker share one channel
// (unless ConnectionOptions::own_connection). Safe for concurrent use. Each
// call blocks until its reply or its deadline, or until the channel's
// keepalive gives the connection up (kClientKeepaliveTime,
// kClientKeepaliveTimeout in limits.h: UNAVAILABLE, "keepalive watchdog
// timeout", a loss on the way: MayHaveBeenAccepted in errors.h).
class WorkerConnection final {
 public:
  // Open makes a connection to `target` ("host:port", or "unix:PATH" for a
  // worker's Unix socket, ServerOptions::unix_socket). Does not dial yet.
  // A "unix:" target is always dialled without TLS, whatever `credentials`
  // say: the worker serves its socket in plaintext, the file's owner-only
  // mode being its access control. INVALID_ARGUMENT for an empty target.
  static absl::StatusOr<std::unique_ptr<WorkerConnection>> Open(
      std::string target, Credentials credentials = Credentials::Insecure(),
      ConnectionOptions options = {});

  ~WorkerConnection();

  // IdleTime returns the worker's idle seconds (Idle RPC) with a per-call
  // deadline of `timeout`. INVALID_ARGUMENT without calling the worker for a
  // non-positive timeout; otherwise the call's gRPC status.
  absl::StatusOr<double> IdleTime(Duration timeout);

  // Stop asks the worker to stop with a drain `grace` (see Worker::Stop) and
  // returns once it drained. `timeout` bounds the whole call; it must be
  // positive (INVALID_ARGUMENT otherwise, and no call is made). Give it more
  // than the grace: a call that ends first (DEADLINE_EXCEEDED) leaves the
  // drain running.
  // With `if_idle_for`, a conditional stop: the worker stops only if it
  // has been idle at least that long (StopRequest.if_idle_for_seconds);
  // FAILED_PRECONDITION (ClassifyError: kStillBusy) when it keeps serving.
  absl::StatusOr<StopSummary> Stop(
      Duration grace, Duration timeout,
      std::optional<Duration> if_idle_for = std::nullopt);

  // Dispatch runs `request` on the worker, calling `callbacks` as events
  // arrive, and returns the job's outcome. `timeout`, if set, bounds the
  // whole call (a positive value; INVALID_ARGUMENT otherwise). A status is
  // returned when the job was refused (e.g. RESOURCE_EXHAUSTED), when the
  // request is over the message limit (INVALID_ARGUMENT, without a call), or
  // when the call broke; DATA_LOSS if the stream ended without a terminal
  // event. A failure after the worker accepted the job is marked so
  // (MarkAccepted), and ClassifyError never calls it transient.
  absl::StatusOr<JobOutcome> Dispatch(const JobRequest& request,
                                      const DispatchCallbacks& callbacks,
                                      std::optional<Duration> timeout = {});

  // DispatchStream runs `request` like Dispatch and streams the job's
  // standard input from `stdin_fd` (DispatchStream RPC): the job starts at
  // once, and the descriptor is read, a chunk of at most kStdinChunkBytes per
  // read(2), only after the worker accepted the job and only as fast as the
  // job takes its input; its end of file closes the job's stdin. Reading
  // stops early when the worker says the job closed its stdin, or when the
  // call ends. `timeout` bounds the whole call, input included, even while
  // the descriptor has nothing to read. `stdin_fd` is not owned, and its
  // flags are left alone; a blocking descriptor is fine. Errors as for
  // Dispatch, plus INTERNAL (accepted) when reading the descriptor failed,
  // which cancels the job. A worker that predates DispatchStream answers
  // UNIMPLEMENTED.
  absl::StatusOr<JobOutcome> DispatchStream(
      const JobRequest& request, int stdin_fd,
      const DispatchCallbacks& callbacks, std::optional<Duration> timeout = {});

  // Submit dispatches `request` (Dispatch RPC, its stdin whole in the
  // request) and returns once the worker accepted it (or, with
  // attach_if_exists, found it), with the offsets to attach from; then it
  // ends the call, so the job runs on under its detach grace (a grace of
  // zero would cancel it: INVALID_ARGUMENT, with nothing sent). Errors as
  // Dispatch's before acceptance. `timeout` bounds the call.
  absl::StatusOr<StreamOffsets> Submit(const JobRequest& request,
                                       std::optional<Duration> timeout = {});

  // Attach reads job `job_id`'s events from the byte offsets `from` (Attach
  // RPC), calling `callbacks` (on_attached first), and returns its outcome:
  // at once for a job that has ended, else when it ends. NOT_FOUND for an
  // unknown or expired job, PERMISSION_DENIED for another identity's. A
  // failure after `attached` is marked so (MarkAccepted): the job runs on.
  // The call follows the job; as JobJournal::Role::kControl it takes the
  // job over (its controller before ends with ABORTED, and so does this
  // call when another takes it over). `timeout` as for Dispatch.
  absl::StatusOr<JobOutcome> Attach(
      const std::string& job_id, StreamOffsets from,
      const DispatchCallbacks& callbacks, std::optional<Duration> timeout = {},
      JobJournal::Role role = JobJournal::Role::kFollow);

  // ListJobsPage lists one page of the jobs the worker runs or retains
  // that this client may see, oldest first: `page_size` of them (0: the
  // worker's default, 100; at most 1000), after `page_token` (empty: from
  // the first). `timeout` bounds the call.
  absl::StatusOr<JobsPage> ListJobsPage(uint32_t page_size,
                                        const std::string& page_token,
                                        Duration timeout);

  // ListJobs is every page of ListJobsPage, each call within `timeout`.
  absl::StatusOr<std::vector<JobInfo>> ListJobs(Duration timeout);

  // GetStatus returns the worker's state (Status RPC). UNIMPLEMENTED from a
  // worker that predates it; `timeout` bounds the call (positive).
  absl::StatusOr<WorkerState> GetStatus(Duration timeout);

  // Cancel cancels job `job_id` (SIGTERM, then SIGKILL after `grace`; zero:
  // at once) and returns its outcome once it has ended. NOT_FOUND for an
  // unknown or expired job. `timeout` bounds the call (positive).
  absl::StatusOr<JobOutcome> Cancel(const std::string& job_id, Duration grace,
                                    Duration timeout);

  // ServingStatus is the worker's answer to gRPC's standard health check.
  enum class ServingStatus { kUnknown, kServing, kNotServing };

  // Health calls grpc.health.v1.Health/Check for `service` (empty: the
  // whole server; the worker also answers for "cfdb.worker.v1.Worker") with
  // a deadline of `timeout` (positive; INVALID_ARGUMENT otherwise).
  // NOT_FOUND for a service the server does not know (gRPC's
  // doc/health-checking.md).
  absl::StatusOr<ServingStatus> Health(Duration timeout,
                                       const std::string& service = "");

  // Close releases this connection's hold on the pooled channel (calls in
  // progress finish first). Later calls, and a second Close, fail with
  // FAILED_PRECONDITION.
  absl::Status Close();

  const std::string& target() const { return target_; }
  const Credentials& credentials() const { return credentials_; }

 private:
  class Impl;
  WorkerConnection(std::string target, Credentials credentials,
                   std::unique_ptr<Impl> impl);
  std::string target_;
  Credentials credentials_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cfdb::worker

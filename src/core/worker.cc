#include "cfdb/worker/worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "core/job_registry.h"
#include "core/job_threads.h"
#include "core/log.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

constexpr std::size_t kMaxJobIdBytes = 256;

absl::Status NoSuchJob(std::string_view job_id) {
  return absl::NotFoundError(absl::StrCat(
      "no job '", EscapedForLog(job_id),
      "' runs here or has a result retained (it never ran here, or its "
      "result expired)"));
}

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e; });
}

}  // namespace

Worker::Worker(WorkerOptions options, const Clock& clock)
    : options_(options),
      docket_(clock, options.max_concurrent_tasks),
      clock_(clock),
      registry_(std::make_unique<JobRegistry>(
          clock, options.result_ttl,
          docket_.capacity() * options.output_buffer_bytes)),
      threads_(
          std::make_unique<JobThreads>(docket_.capacity(), options.job_nice)) {
  // Last, once nothing above can throw: a thread left unjoined would end
  // the process.
  drain_thread_ = std::thread([this] { Drain(); });
}

Worker::~Worker() {
  {
    // Whoever registered these may be gone already.
    absl::MutexLock lock(&mu_);
    on_stopping_.clear();
    on_drained_.clear();
  }
  RequestStop({.source = "worker destroyed", .grace = Duration::zero()});
  drain_thread_.join();
  // threads_, declared last, is destroyed first: it joins every job thread
  // before the docket and the kinds they use go away.
}

// Sink parameters, moved into the registry (clang-tidy 14 and 22 miss the
// move).
// NOLINTNEXTLINE(performance-unnecessary-value-param)
absl::Status Worker::RegisterKind(std::string name, JobKind kind) {
  if (name.empty() || !kind.run) {
    return absl::InvalidArgumentError("a job kind needs a name and a handler");
  }
  if (kinds_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("job kind '", name, "' is already registered"));
  }
  kinds_.emplace(std::move(name), std::move(kind));
  return absl::OkStatus();
}

absl::Status Worker::Validate(const JobRequest& request) const {
  if (request.job_id.empty() || request.job_id.size() > kMaxJobIdBytes ||
      !Printable(request.job_id)) {
    return absl::InvalidArgumentError(
        "job_id: must be 1 to 256 printable ASCII bytes");
  }
  const auto kind = kinds_.find(request.kind);
  if (kind == kinds_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kind: unknown job kind '", EscapedForLog(request.kind), "'"));
  }
  return kind->second.validate ? kind->second.validate(request)
                               : absl::OkStatus();
}

absl::Status Worker::Dispatch(const std::shared_ptr<Job>& job) {
  if (absl::Status s = Validate(job->request()); !s.ok()) return s;
  // Without its eventfd (descriptors ran out) a job blocked in poll(2) would
  // never see a cancel or a stop, so refuse it; the client retries later.
  if (job->cancel_fd() < 0) {
    return absl::ResourceExhaustedError(
        "out of file descriptors: no cancel eventfd for the job");
  }
  const JobHandler* handler = &kinds_.find(job->request().kind)->second.run;
  job->worker_ = this;
  job->started_ = clock_.Now();
  job->started_wall_ = std::chrono::system_clock::now();
  if (absl::Status s =
          registry_->Add(job, [&] { return docket_.Admit(job.get()); });
      !s.ok()) {
    return s;
  }
  ++jobs_started_;
  job->journal().CountDropsInto(&output_dropped_);
  job->OnAccepted();

  if (!threads_->Post([this, job, handler] { Run(job, handler); })) {
    // Accepted already: report the failure rather than dropping the job.
    EndJob(job, JobOutcome::Failed(JobOutcome::Failure::kStartFailed,
                                   "no thread to run the job on"));
  }
  return absl::OkStatus();
}

void Worker::Run(const std::shared_ptr<Job>& job, const JobHandler* handler) {
  const JobRequest& request = job->request();
  spdlog::debug("job {}: started ({})", request.job_id, request.kind);
  JobOutcome outcome;
  job->Running();  // from now, unless the handler says later
  try {
    outcome = (*handler)(*job);
  } catch (const std::exception& e) {
    outcome = JobOutcome::Failed(JobOutcome::Failure::kHandlerError, e.what());
  }
  LogEvent(spdlog::level::info,
           absl::StrCat("job ", request.job_id, ": ", outcome.ToString()),
           {{"job_id", request.job_id},
            {"kind", request.kind},
            {"outcome", outcome.kind == JobOutcome::Kind::kFailed
                            ? std::string(FailureName(outcome.failure))
                        : outcome.kind == JobOutcome::Kind::kSignaled
                            ? std::string("SIGNALED")
                            : std::string("EXITED")}});
  EndJob(job, outcome);
}

void Worker::EndJob(const std::shared_ptr<Job>& job,
                    const JobOutcome& outcome) {
  // The job leaves the docket before its end is told, so that a client
  // that has its outcome finds the slot free and the idle clock running;
  // the drain still waits for the telling (`telling_`), so that whoever
  // waits for the drain finds every outcome told.
  {
    absl::MutexLock lock(&mu_);
    ++telling_;
  }
  const JobEnd end = JobEndOf(outcome);
  ++ended_[static_cast<std::size_t>(end)];
  if (on_job_end_) {
    const TimePoint now = clock_.Now();
    const Duration::rep running = job->running_.load();
    on_job_end_({.end = end,
                 .start = running != 0
                              ? TimePoint(Duration(running)) - job->started_
                              : now - job->started_,
                 .total = now - job->started_});
  }
  ReleaseJob(job.get());
  // The handler has returned: nothing reads the spec or the payload any
  // more. Freed before the end is told, so that a caller holding the
  // outcome finds the retained result already small.
  job->ReleaseRequest();
  JobOutcome kept = outcome;
  kept.message = CutUtf8(outcome.message, kMaxOutcomeMessageBytes);
  job->End(kept, clock_.Now());
  registry_->Ended(job);
  job->OnOutcome(kept);
  {
    absl::MutexLock lock(&mu_);
    --telling_;
  }
  changed_.SignalAll();
}

JobEnd JobEndOf(const JobOutcome& outcome) {
  using enum JobOutcome::Failure;
  switch (outcome.kind) {
    case JobOutcome::Kind::kExited:
      return outcome.code == 0 ? JobEnd::kSucceeded : JobEnd::kExitedNonZero;
    case JobOutcome::Kind::kSignaled:
      return JobEnd::kSignaled;
    case JobOutcome::Kind::kFailed:
      break;
  }
  switch (outcome.failure) {
    case kCancelled:
      return JobEnd::kCancelled;
    case kTimeLimitExceeded:
      return JobEnd::kTimedOut;
    case kHandlerError:
      return JobEnd::kHandlerError;
    case kNone:
    case kStartFailed:
      break;
  }
  return JobEnd::kStartFailed;
}

std::string_view JobEndName(JobEnd end) {
  static constexpr std::string_view kNames[kJobEndCount] = {
      "succeeded", "exited_nonzero", "signaled", "start_failed",
      "timed_out", "handler_error",  "cancelled"};
  return kNames[static_cast<std::size_t>(end)];
}

JobCounts Worker::counts() const {
  JobCounts counts{.started = jobs_started_.load(),
                   .known = registry_->Size(),
                   .unread_evicted = registry_->UnreadEvicted(),
                   .output_dropped_bytes = output_dropped_.load()};
  for (const std::shared_ptr<Job>& job : registry_->All()) {
    counts.output_buffered_bytes += job->journal().stats().retained_bytes;
  }
  for (std::size_t i = 0; i < kJobEndCount; ++i) {
    counts.ended[i] = ended_[i].load();
    const auto end = static_cast<JobEnd>(i);
    (end == JobEnd::kSucceeded   ? counts.succeeded
     : end == JobEnd::kCancelled ? counts.cancelled
                                 : counts.failed) += counts.ended[i];
  }
  return counts;
}

void Worker::ReleaseJob(Job* job) {
  // The drain waits for the docket to empty: tell it when it has.
  if (docket_.Release(job) && docket_.closed()) {
    absl::MutexLock lock(&mu_);
    changed_.SignalAll();
  }
}

void Worker::OnStopping(std::function<void()> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (requests_.empty()) {
      on_stopping_.push_back(std::move(callback));
      return;
    }
  }
  callback();  // the drain has begun already
}

void Worker::OnDrained(std::function<void(const StopSummary&)> callback) {
  std::optional<StopSummary> summary;
  {
    absl::MutexLock lock(&mu_);
    if (!drained_) {
      on_drained_.push_back(std::move(callback));
      return;
    }
    summary = Report().summary;
  }
  callback(*summary);
}

void Worker::RequestStop(StopRequest request) {
  if (request.arrival == TimePoint{}) {
    request.arrival = std::chrono::steady_clock::now();
  }
  std::vector<std::function<void()>> on_stopping;
  {
    absl::MutexLock lock(&mu_);
    if (requests_.empty()) {
      docket_.Close();
      in_flight_at_stop_ = docket_.in_flight();
      idle_at_stop_ = docket_.Idle();
      on_stopping.swap(on_stopping_);
    }
    requests_.Add(request);
  }
  changed_.SignalAll();
  for (const auto& callback : on_stopping) callback();
}

std::optional<StopState> Worker::stop_state() const {
  absl::MutexLock lock(&mu_);
  if (requests_.empty()) return std::nullopt;
  return StopState{.idle_at_request = idle_at_stop_,
                   .in_flight_at_request = in_flight_at_stop_,
                   .sources = requests_.sources(),
                   .deadline = requests_.deadline()};
}

void Worker::Drain() {
  std::vector<std::function<void(const StopSummary&)>> on_drained;
  StopSummary summary;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](StopRequests* r) { return !r->empty(); }, &requests_));
    bool cancelled_all = false;
    while (docket_.in_flight() > 0 || telling_ > 0) {
      const bool running = docket_.in_flight() > 0;
      const TimePoint deadline = requests_.deadline();
      if (running && !cancelled_all &&
          std::chrono::steady_clock::now() >= deadline) {
        cancelled_all = true;
        cancelled_ = docket_.CancelAll();
        continue;
      }
      // Only outcomes being told: no deadline applies to that.
      changed_.WaitUntil(
          mu_, cancelled_all || !running ? TimePoint::max() : deadline);
    }
    drained_ = true;
    drained_at_ = std::chrono::steady_clock::now();
    on_drained.swap(on_drained_);
    summary = Report().summary;
  }
  changed_.SignalAll();
  for (const auto& callback : on_drained) callback(summary);
}

DrainReport Worker::Report() const {
  const TimePoint began = requests_.first_arrival();
  DrainReport report;
  report.summary.cancelled = std::min(cancelled_, in_flight_at_stop_);
  report.summary.drained = in_flight_at_stop_ - report.summary.cancelled;
  report.requests = requests_.Describe(began);
  report.deadline_source = requests_.deadline_source();
  report.took = drained_at_ - began;
  return report;
}

std::optional<DrainReport> Worker::WaitDrainedUntil(TimePoint deadline) {
  absl::MutexLock lock(&mu_);
  if (!changed_.AwaitUntil(
          mu_, deadline,
          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return drained_; })) {
    return std::nullopt;
  }
  return Report();
}

DrainReport Worker::WaitDrained() {
  std::optional<DrainReport> report;
  while (!report) report = WaitDrainedUntil(TimePoint::max());
  return *report;
}

absl::StatusOr<std::shared_ptr<Job>> Worker::FindFor(std::string_view job_id,
                                                     const JobCaller& caller) {
  std::shared_ptr<Job> job = registry_->Find(job_id);
  if (job == nullptr) return NoSuchJob(job_id);
  if (!caller.Owns(job->request())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job '", EscapedForLog(job_id),
        "' belongs to another identity: only the identity that dispatched "
        "it and those of --tls-admit-admin may attach to or cancel it"));
  }
  return job;
}

absl::StatusOr<std::pair<std::shared_ptr<Job>, JobJournal::Attachment>>
Worker::Attach(std::string_view job_id, const JobCaller& caller,
               const std::shared_ptr<JobReader>& reader, StreamOffsets from,
               JobJournal::Role role) {
  absl::StatusOr<std::shared_ptr<Job>> job = FindFor(job_id, caller);
  if (!job.ok()) return job.status();
  JobJournal::Attachment attachment =
      (*job)->journal().Attach(reader, from, role);
  return std::make_pair(*std::move(job), attachment);
}

std::vector<std::shared_ptr<Job>> Worker::Jobs() { return registry_->All(); }

absl::StatusOr<std::shared_ptr<Job>> Worker::CancelJob(std::string_view job_id,
                                                       const JobCaller& caller,
                                                       Duration kill_grace) {
  absl::StatusOr<std::shared_ptr<Job>> job = FindFor(job_id, caller);
  if (!job.ok()) return job.status();
  if (!(*job)->ended()) {
    spdlog::info("job {}: cancelled on request, kill grace {:.3f} s",
                 EscapedForLog(job_id), ToSeconds(kill_grace));
    (*job)->CancelWithin(kill_grace);
  }
  return job;
}

absl::Status Worker::RequestStopIfIdle(StopRequest request, Duration idle_for) {
  if (stopping()) {
    RequestStop(std::move(request));
    return absl::OkStatus();
  }
  absl::Status decided = registry_->IfNoUnreadResults(
      [&] { return docket_.CloseIfIdleFor(idle_for); });
  if (!decided.ok()) return decided;
  RequestStop(std::move(request));
  return absl::OkStatus();
}

StopSummary Worker::Stop(Duration grace) {
  RequestStop({.source = "Stop()", .grace = grace});
  return WaitDrained().summary;
}

}  // namespace cfdb::worker

#include "cfdb/worker/job_handle.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "cfdb/worker/worker.h"
#include "core/job_registry.h"
#include "core/text.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {
namespace {

JobRequest Kept(JobRequest request) {
  request.client = CutUtf8(request.client, kMaxListedBytes);
  request.program = CutUtf8(request.program, kMaxListedBytes);
  return request;
}

}  // namespace

Job::Job(JobRequest request, Duration kill_grace,
         std::size_t output_buffer_bytes)
    : request_(Kept(std::move(request))),
      kill_grace_(kill_grace.count()),
      cancel_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      journal_({.buffer_bytes = output_buffer_bytes,
                .drop_oldest = request_.drop_oldest}) {}

Job::~Job() {
  if (cancel_fd_ >= 0) close(cancel_fd_);
}

bool Job::cancelled() const { return cancelled_.load(); }

Duration Job::kill_grace() const { return Duration(kill_grace_.load()); }

Job::EmitResult Job::Emit(OutputStream stream, std::string_view data,
                          TimePoint deadline) {
  return journal_.Append(stream, std::string(data), deadline);
}

void Job::Cancel() {
  if (cancelled_.exchange(true)) return;
  journal_.Cancelled();
  {
    absl::MutexLock lock(&mu_);
    const uint64_t one = 1;
    if (cancel_fd_ >= 0) (void)!write(cancel_fd_, &one, sizeof one);
  }
  OnCancelled();
}

void Job::CancelWithin(Duration kill_grace) {
  kill_grace_ = std::max(kill_grace, Duration::zero()).count();
  Cancel();
}

void Job::ReaderLeft(const JobReader* reader) {
  const JobJournal::Left left = journal_.Leave(reader);
  if (!left.controller && !left.unattended) return;
  const Duration grace = request_.detach_grace;
  const std::string& id = request_.job_id;
  if (grace == Duration::zero()) {
    // The controller's leaving cancels it at once, followers or not.
    if (!ended()) Cancel();
  } else if (!left.unattended) {
    return;  // followers still read it: the grace counts once they leave
  } else if (grace < Duration::zero()) {
    spdlog::info("job {}: no client attached; it runs on", id);
  } else if (worker_ != nullptr) {
    spdlog::info("job {}: no client attached; it runs on for {:.3f} s", id,
                 ToSeconds(grace));
    worker_->registry_->CancelUnlessAttached(
        shared_from_this(), std::chrono::steady_clock::now() + grace);
  }
}

void Job::WhenEnded(std::function<void(const JobOutcome&)> callback) {
  std::optional<JobOutcome> outcome;
  {
    absl::MutexLock lock(&mu_);
    if (!outcome_) {
      when_ended_.push_back(std::move(callback));
      return;
    }
    outcome = outcome_;
  }
  callback(*outcome);
}

std::optional<JobOutcome> Job::outcome() const {
  absl::MutexLock lock(&mu_);
  return outcome_;
}

std::optional<TimePoint> Job::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void Job::Running() {
  // On the worker's clock, as started_ is.
  const TimePoint now = worker_ != nullptr ? worker_->clock_.Now()
                                           : std::chrono::steady_clock::now();
  running_ = now.time_since_epoch().count();
}

void Job::ReleaseRequest() {
  request_.spec.reset();
  std::string().swap(request_.payload);
}

void Job::End(const JobOutcome& outcome, TimePoint now) {
  std::vector<std::function<void(const JobOutcome&)>> when_ended;
  {
    absl::MutexLock lock(&mu_);
    outcome_ = outcome;
    ended_ = now;
    when_ended.swap(when_ended_);
    // The handler has returned: nothing waits on the descriptor any more.
    if (const int fd = cancel_fd_.exchange(-1); fd >= 0) close(fd);
  }
  journal_.End(outcome);
  for (const auto& callback : when_ended) callback(outcome);
}

}  // namespace cfdb::worker

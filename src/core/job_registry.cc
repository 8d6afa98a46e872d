#include "core/job_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/text.h"

namespace cfdb::worker {
namespace {

// EndedAt is when a job of ended_ ended. Worker::EndJob ends a job before
// it reaches ended_, so the fallback, `now`, is never taken.
TimePoint EndedAt(const Job& job, TimePoint now) {
  return job.ended().value_or(now);
}

// Unread: a job that ran detached (a non-zero detach grace) whose outcome
// no client has been given. The results clients come back for.
bool Unread(const Job& job) {
  return job.request().detach_grace != Duration::zero() &&
         !job.journal().stats().claimed;
}

}  // namespace

JobRegistry::JobRegistry(const Clock& clock, Duration ttl,
                         std::size_t retained_output_bytes)
    : clock_(clock),
      ttl_(ttl),
      retained_output_bytes_(retained_output_bytes),
      keeper_([this] { Keep(); }) {}

JobRegistry::~JobRegistry() {
  {
    absl::MutexLock lock(&keeper_mu_);
    closing_ = true;
  }
  keeper_changed_.SignalAll();
  keeper_.join();
}

absl::Status JobRegistry::Add(const std::shared_ptr<Job>& job,
                              const std::function<absl::Status()>& admit) {
  absl::MutexLock lock(&mu_);
  Expire();
  const std::string& id = job->request().job_id;
  if (const auto it = jobs_.find(id); it != jobs_.end()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "job_id: a job of this id ",
        it->second->ended() ? "has ended and its result is retained"
                            : "is running",
        "; attach to it, or choose another id"));
  }
  if (absl::Status s = admit(); !s.ok()) return s;
  jobs_.emplace(id, job);
  return absl::OkStatus();
}

void JobRegistry::Forget(const std::shared_ptr<Job>& job) {
  const auto it = jobs_.find(job->request().job_id);
  if (it != jobs_.end() && it->second == job) jobs_.erase(it);
  // By end, as ended_: the one forgotten is nearly always the first.
  const auto kept = std::find_if(with_output_.begin(), with_output_.end(),
                                 [&](const auto& e) { return e.first == job; });
  if (kept != with_output_.end()) {
    output_bytes_ -= kept->second;
    with_output_.erase(kept);
  }
}

void JobRegistry::Ended(const std::shared_ptr<Job>& job) {
  absl::MutexLock lock(&mu_);
  if (ttl_ <= Duration::zero()) {
    Forget(job);
    return;
  }
  ended_.push_back(job);
  // An ended job's output only shrinks (Release), so it is counted once.
  if (const std::size_t bytes = job->journal().stats().retained_bytes;
      bytes > 0) {
    with_output_.emplace_back(job, bytes);
    output_bytes_ += bytes;
  }
  // Within the budget, the oldest results lose their output first.
  while (output_bytes_ > retained_output_bytes_) {
    with_output_.front().first->journal().Release();
    output_bytes_ -= with_output_.front().second;
    with_output_.pop_front();
  }
  Expire();
}

void JobRegistry::Expire() {
  const TimePoint now = clock_.Now();
  while (!ended_.empty() && now - EndedAt(*ended_.front(), now) >= ttl_) {
    Forget(ended_.front());
    ended_.pop_front();
  }
  while (ended_.size() > kMaxRetainedResults) Evict();
}

void JobRegistry::Evict() {
  auto victim = std::find_if(ended_.begin(), ended_.end(),
                             [](const auto& job) { return !Unread(*job); });
  if (victim == ended_.end()) {
    // Every result is unread: the identity holding the most gives one up.
    absl::flat_hash_map<std::string_view, std::size_t> held;
    std::string_view most;
    std::size_t most_held = 0;
    for (const std::shared_ptr<Job>& job : ended_) {
      const std::size_t n = ++held[job->request().client];
      if (n > most_held) {
        most = job->request().client;
        most_held = n;
      }
    }
    victim = std::find_if(ended_.begin(), ended_.end(), [&](const auto& job) {
      return job->request().client == most;
    });
    const Job& evicted = **victim;
    const uint64_t count = ++unread_evicted_;
    eviction_log_.Log(
        "unread result evicted", spdlog::level::warn,
        absl::StrFormat(
            "job %s: its unread result was evicted: %d results are retained, "
            "the most a worker keeps; %s holds the most of them (%d "
            "unread results evicted so far)",
            EscapedForLog(evicted.request().job_id), kMaxRetainedResults,
            EscapedForLog(most), count),
        {{"job_id", evicted.request().job_id}, {"client", std::string(most)}});
  }
  const std::shared_ptr<Job> job = *victim;
  ended_.erase(victim);
  Forget(job);
}

std::shared_ptr<Job> JobRegistry::Find(std::string_view job_id) {
  absl::MutexLock lock(&mu_);
  Expire();
  const auto it = jobs_.find(absl::string_view(job_id.data(), job_id.size()));
  return it == jobs_.end() ? nullptr : it->second;
}

std::size_t JobRegistry::Size() {
  absl::MutexLock lock(&mu_);
  return jobs_.size();
}

std::vector<std::shared_ptr<Job>> JobRegistry::All() {
  std::vector<std::shared_ptr<Job>> all;
  {
    absl::MutexLock lock(&mu_);
    Expire();
    all.reserve(jobs_.size());
    for (const auto& [id, job] : jobs_) all.push_back(job);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a->started() != b->started()
               ? a->started() < b->started()
               : a->request().job_id < b->request().job_id;
  });
  return all;
}

absl::Status JobRegistry::IfNoUnreadResults(
    const std::function<absl::Status()>& decide) {
  absl::MutexLock lock(&mu_);
  Expire();
  std::size_t unread = 0;
  const Job* first = nullptr;
  for (const std::shared_ptr<Job>& job : ended_) {
    if (Unread(*job)) {
      ++unread;
      if (first == nullptr) first = job.get();
    }
  }
  if (first != nullptr) {
    const TimePoint now = clock_.Now();
    const Duration left = ttl_ - (now - EndedAt(*first, now));
    return absl::FailedPreconditionError(absl::StrFormat(
        "%d detached job(s) ended with a result no client has read yet "
        "(the first: '%s', kept for %.0f s more)",
        unread, first->request().job_id, ToSeconds(left)));
  }
  return decide();
}

void JobRegistry::CancelUnlessAttached(const std::shared_ptr<Job>& job,
                                       TimePoint deadline) {
  {
    absl::MutexLock lock(&keeper_mu_);
    detached_[job.get()] = Detached{job, deadline};
  }
  keeper_changed_.SignalAll();
}

void JobRegistry::Keep() {
  absl::MutexLock lock(&keeper_mu_);
  while (!closing_) {
    const TimePoint now = std::chrono::steady_clock::now();
    TimePoint next = TimePoint::max();
    std::vector<std::shared_ptr<Job>> due;
    absl::erase_if(detached_, [&](const auto& entry) {
      const Detached& d = entry.second;
      std::shared_ptr<Job> job = d.job.lock();
      if (job == nullptr || job->ended() || job->journal().attached()) {
        return true;
      }
      if (d.deadline > now) {
        next = std::min(next, d.deadline);
        return false;
      }
      due.push_back(std::move(job));
      return true;
    });
    if (!due.empty()) {
      keeper_mu_.Unlock();
      for (const std::shared_ptr<Job>& job : due) {
        LogEvent(spdlog::level::info,
                 absl::StrFormat("job %s: no client attached for its detach "
                                 "grace of %.3f s: cancelling it",
                                 job->request().job_id,
                                 ToSeconds(job->request().detach_grace)),
                 {{"job_id", job->request().job_id}});
        job->Cancel();
      }
      keeper_mu_.Lock();
      continue;
    }
    keeper_changed_.WaitUntil(keeper_mu_, next);
  }
}

}  // namespace cfdb::worker

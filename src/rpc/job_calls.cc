#include "rpc/job_calls.h"

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/drain.h"
#include "rpc/wire.h"

namespace cfdb::worker {
namespace {

// CancelReactor is one Cancel call, answered when its job ends, from the
// job's thread, or with CANCELLED when its client leaves first: whichever
// comes first finishes the call, once.
class CancelReactor final : public grpc::ServerUnaryReactor {
 public:
  // State outlives the reactor: the job's end may come after the call.
  struct State {
    absl::Mutex mu;
    CancelReactor* reactor ABSL_GUARDED_BY(mu);
    grpc::ByteBuffer* reply ABSL_GUARDED_BY(mu);
    bool finished ABSL_GUARDED_BY(mu) = false;

    // Finish finishes the call with `status` (writing `outcome` first when
    // OK) unless it was finished already.
    void Finish(const grpc::Status& status, const JobOutcome* outcome) {
      CancelReactor* finishing = nullptr;
      {
        absl::MutexLock lock(&mu);
        if (finished) return;
        finished = true;
        if (outcome != nullptr) {
          v1::CancelReply answer;
          wire::SetOutcome(*outcome, answer);
          Serialize(answer, reply);
        }
        finishing = reactor;
      }
      finishing->grpc::ServerUnaryReactor::Finish(status);
    }
  };

  CancelReactor(CallTracker& calls, grpc::ByteBuffer* reply) : calls_(calls) {
    calls_.Started();
    absl::MutexLock lock(&state_->mu);
    state_->reactor = this;
    state_->reply = reply;
  }

  const std::shared_ptr<State>& state() { return state_; }

  void OnCancel() override {
    state_->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                "the Cancel call ended before the job did"),
                   nullptr);
  }
  void OnDone() override {
    calls_.Done();
    delete this;
  }

 private:
  CallTracker& calls_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

void FillJobInfo(const Job& job, TimePoint now, v1::JobInfo& info) {
  const JobRequest& request = job.request();
  info.set_job_id(request.job_id);
  info.set_kind(request.kind);
  info.set_client(request.client);
  info.set_program(request.program);
  info.set_started_unix_seconds(
      std::chrono::duration<double>(job.started_wall().time_since_epoch())
          .count());
  const std::optional<TimePoint> ended = job.ended();
  info.set_running_seconds(ToSeconds(ended.value_or(now) - job.started()));
  const JobJournal::Stats output = job.journal().stats();
  info.set_attached(output.attached);
  info.set_readers(output.readers);
  info.set_retained_bytes(output.retained_bytes);
  info.set_stdout_bytes(output.written.stdout_bytes);
  info.set_stderr_bytes(output.written.stderr_bytes);
  info.set_dropped_bytes(output.dropped.stdout_bytes +
                         output.dropped.stderr_bytes);
  info.set_detach_grace_seconds(request.detach_grace < Duration::zero()
                                    ? -1
                                    : ToSeconds(request.detach_grace));
  const std::optional<JobOutcome> outcome = job.outcome();
  info.set_state(outcome ? v1::JobInfo::ENDED : v1::JobInfo::RUNNING);
  if (outcome) wire::SetOutcome(*outcome, info);
}

namespace {

// A page token is where the last page ended: its last job's acceptance (in
// the worker's clock ticks) and id, so that a job that expires meanwhile
// moves no other from one page to the next.
struct PagePlace {
  Duration::rep started = 0;
  std::string job_id;
};

std::string PageToken(const Job& job) {
  return absl::WebSafeBase64Escape(absl::StrCat(
      job.started().time_since_epoch().count(), "/", job.request().job_id));
}

absl::StatusOr<std::optional<PagePlace>> ParsePageToken(
    const std::string& token) {
  if (token.empty()) return std::nullopt;
  std::string text;
  PagePlace place;
  const std::size_t slash =
      absl::WebSafeBase64Unescape(token, &text) ? text.find('/') : text.npos;
  if (slash == text.npos ||
      !absl::SimpleAtoi(absl::string_view(text).substr(0, slash),
                        &place.started)) {
    return absl::InvalidArgumentError(
        "page_token: not one this worker gave (pass a reply's "
        "next_page_token, or none for the first page)");
  }
  place.job_id = text.substr(slash + 1);
  return place;
}

bool After(const Job& job, const PagePlace& place) {
  const Duration::rep started = job.started().time_since_epoch().count();
  return started != place.started ? started > place.started
                                  : job.request().job_id > place.job_id;
}

}  // namespace

absl::Status ListJobs(Worker& worker, const JobCaller& caller,
                      const v1::ListJobsRequest& request,
                      v1::ListJobsReply& reply) {
  if (request.page_size() > kMaxJobsPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: at most ", kMaxJobsPageSize,
                     " (0: ", kDefaultJobsPageSize, ")"));
  }
  absl::StatusOr<std::optional<PagePlace>> place =
      ParsePageToken(request.page_token());
  if (!place.ok()) return place.status();
  const uint32_t page_size =
      request.page_size() == 0 ? kDefaultJobsPageSize : request.page_size();
  const TimePoint now = SteadyClock::Get().Now();
  const Job* last = nullptr;
  for (const std::shared_ptr<Job>& job : worker.Jobs()) {
    if (!caller.Owns(job->request())) {
      const bool ended = job->ended().has_value();
      reply.set_others_ended(reply.others_ended() + (ended ? 1 : 0));
      reply.set_others_running(reply.others_running() + (ended ? 0 : 1));
      continue;
    }
    if (*place && !After(*job, **place)) continue;
    if (static_cast<uint32_t>(reply.jobs_size()) == page_size) {
      reply.set_next_page_token(PageToken(*last));
      continue;  // counting the others still
    }
    FillJobInfo(*job, now, *reply.add_jobs());
    last = job.get();
  }
  return absl::OkStatus();
}

void FillStatus(Worker& worker, const JobCaller& caller,
                const ServeStatus& serve, v1::StatusReply& reply) {
  reply.set_version(serve.version);
  reply.set_uptime_seconds(ToSeconds(serve.uptime));
  reply.set_idle_seconds(ToSeconds(worker.Idle()));
  reply.set_max_concurrent_jobs(
      static_cast<uint32_t>(worker.options().max_concurrent_tasks));
  const std::vector<std::shared_ptr<Job>> jobs = worker.Jobs();
  reply.set_jobs_retained(static_cast<uint32_t>(jobs.size()));
  for (const std::shared_ptr<Job>& job : jobs) {
    if (job->ended()) continue;
    reply.set_jobs_in_flight(reply.jobs_in_flight() + 1);
    if (!caller.Owns(job->request())) {
      reply.set_other_jobs_in_flight(reply.other_jobs_in_flight() + 1);
    } else if (reply.job_ids_size() < kMaxStatusJobIds) {
      reply.add_job_ids(job->request().job_id);
    }
  }
  reply.set_draining(worker.stopping());
  if (serve.retires_at_unix_seconds && !reply.draining()) {
    reply.set_retires_at_unix_seconds(*serve.retires_at_unix_seconds);
    reply.set_retirement_rule(serve.retirement_rule);
  }
  reply.set_scale_in_protected(serve.scale_in_protected);
  reply.set_identity(serve.identity);
}

grpc::ServerUnaryReactor* StartCancel(Worker& worker, CallTracker& calls,
                                      absl::StatusOr<v1::CancelRequest> request,
                                      const JobCaller& caller,
                                      grpc::ByteBuffer* reply) {
  auto* reactor = new CancelReactor(calls, reply);
  if (request.ok() &&
      (std::isnan(request->grace_seconds()) || request->grace_seconds() < 0)) {
    request = absl::InvalidArgumentError(
        "grace_seconds: must be a number >= 0 (0: SIGKILL at once)");
  }
  absl::StatusOr<std::shared_ptr<Job>> job =
      request.ok()
          ? worker.CancelJob(request->job_id(), caller,
                             GraceFromSeconds(request->grace_seconds()))
          : request.status();
  if (!job.ok()) {
    reactor->state()->Finish(wire::ToGrpc(job.status()), nullptr);
    return reactor;
  }
  (*job)->WhenEnded([state = reactor->state(), job = std::weak_ptr<Job>(*job)](
                        const JobOutcome& outcome) {
    // The outcome is the client's now: the result counts as read.
    if (const std::shared_ptr<Job> ended = job.lock()) {
      ended->journal().Claimed();
    }
    state->Finish(grpc::Status::OK, &outcome);
  });
  return reactor;
}

}  // namespace cfdb::worker

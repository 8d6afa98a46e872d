#include "rpc/job_calls.h"

#include <cmath>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/exec.h"
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
  if (const ExecSpec* exec = FindExec(request);
      exec != nullptr && !exec->argv.empty()) {
    info.set_program(exec->argv.front());
  }
  info.set_started_unix_seconds(
      std::chrono::duration<double>(job.started_wall().time_since_epoch())
          .count());
  const std::optional<TimePoint> ended = job.ended();
  info.set_running_seconds(ToSeconds(ended.value_or(now) - job.started()));
  const JobJournal::Stats output = job.journal().stats();
  info.set_attached(output.attached);
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

void ListJobs(Worker& worker, v1::ListJobsReply& reply) {
  const TimePoint now = SteadyClock::Get().Now();
  for (const std::shared_ptr<Job>& job : worker.Jobs()) {
    FillJobInfo(*job, now, *reply.add_jobs());
  }
}

grpc::ServerUnaryReactor* StartCancel(Worker& worker, CallTracker& calls,
                                      absl::StatusOr<v1::CancelRequest> request,
                                      grpc::ByteBuffer* reply) {
  auto* reactor = new CancelReactor(calls, reply);
  if (request.ok() &&
      (std::isnan(request->grace_seconds()) || request->grace_seconds() < 0)) {
    request = absl::InvalidArgumentError(
        "grace_seconds: must be a number >= 0 (0: SIGKILL at once)");
  }
  absl::StatusOr<std::shared_ptr<Job>> job =
      request.ok()
          ? worker.CancelJob(request->job_id(),
                             GraceFromSeconds(request->grace_seconds()))
          : request.status();
  if (!job.ok()) {
    reactor->state()->Finish(wire::ToGrpc(job.status()), nullptr);
    return reactor;
  }
  (*job)->WhenEnded([state = reactor->state()](const JobOutcome& outcome) {
    state->Finish(grpc::Status::OK, &outcome);
  });
  return reactor;
}

}  // namespace cfdb::worker

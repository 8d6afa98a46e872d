// CollectingJob: a Job for tests that keeps its output and outcome.
#pragma once

#include <atomic>
#include <ostream>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// PrintTo makes gtest print outcomes readably.
inline void PrintTo(const JobOutcome& outcome, std::ostream* os) {
  *os << outcome.ToString();
}

}  // namespace cfdb::worker

namespace cfdb::worker::test_support {

class CollectingJob final : public Job {
 public:
  explicit CollectingJob(JobRequest request,
                         Duration kill_grace = std::chrono::seconds(5))
      : Job(std::move(request), kill_grace) {}

  void OnAccepted() override {
    absl::MutexLock lock(&mu_);
    accepted_ = true;
  }
  EmitResult Emit(OutputStream stream, std::string_view data,
                  TimePoint) override {
    absl::MutexLock lock(&mu_);
    if (cancelled()) return EmitResult::kDropped;
    (stream == OutputStream::kStdout ? out_ : err_).append(data);
    return EmitResult::kSent;
  }
  void OnOutcome(const JobOutcome& outcome) override {
    absl::MutexLock lock(&mu_);
    outcome_ = outcome;
  }

  // WaitForOutput blocks until stdout or stderr contains `text` (or 30 s
  // pass).
  bool WaitForOutput(std::string_view text) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return out_.find(text) != std::string::npos ||
             err_.find(text) != std::string::npos;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30));
  }

  std::string out() {
    absl::MutexLock lock(&mu_);
    return out_;
  }
  std::string err() {
    absl::MutexLock lock(&mu_);
    return err_;
  }
  std::optional<JobOutcome> outcome() {
    absl::MutexLock lock(&mu_);
    return outcome_;
  }

 private:
  absl::Mutex mu_;
  bool accepted_ ABSL_GUARDED_BY(mu_) = false;
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
  std::optional<JobOutcome> outcome_ ABSL_GUARDED_BY(mu_);
};

// UniqueJobId returns "<prefix>-N", a new N each call: a worker refuses a
// second job with the id of one it runs or retains.
inline std::string UniqueJobId(std::string_view prefix = "test-job") {
  static std::atomic<int> next{0};
  return std::string(prefix) + "-" + std::to_string(++next);
}

// GateKind runs a job until `release` is notified (exit 0) or the job is
// cancelled (CANCELLED). `release` must outlive the worker's jobs.
inline JobKind GateKind(absl::Notification& release) {
  return {.run = [&release](JobContext& ctx) {
    while (!release.HasBeenNotified()) {
      if (ctx.cancelled()) {
        return JobOutcome::Failed(JobOutcome::Failure::kCancelled, "");
      }
      release.WaitForNotificationWithTimeout(absl::Milliseconds(2));
    }
    return JobOutcome::Exited(0);
  }};
}

// EchoKind writes the request's payload to stdout and exits 0.
inline JobKind EchoKind() {
  return {.run = [](JobContext& ctx) {
    ctx.Emit(OutputStream::kStdout, ctx.request().payload);
    return JobOutcome::Exited(0);
  }};
}

inline JobRequest ExecRequest(std::vector<std::string> argv) {
  JobRequest request;
  request.job_id = UniqueJobId();
  request.kind = "exec";
  MutableExec(request).argv = std::move(argv);
  MutableExec(request).env = {{"PATH", "/usr/bin:/bin"}};
  return request;
}

}  // namespace cfdb::worker::test_support

// BackgroundDispatch: a job in flight while the test does something else.
// It dispatches on a connection and a thread of its own and is constructed
// once the worker accepted the job.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/job.h"
#include "gtest/gtest.h"

namespace cfdb::worker::test_support {

// BackgroundDispatch dispatches `request` to the worker at `address` (a
// call bounded by `timeout`: a test that fails before its job ends, e.g. an
// endless one it would have cancelled, fails in that time instead of
// waiting for ever) and returns from its constructor once the worker
// accepted the job; a call that ends without acceptance, or 30 s without
// it, fails the test. Not thread-safe; joins its thread when destroyed.
class BackgroundDispatch {
 public:
  BackgroundDispatch(const std::string& address, JobRequest request,
                     Duration timeout = std::chrono::seconds(120)) {
    thread_ = std::thread([this, address, request, timeout] {
      absl::StatusOr<std::unique_ptr<WorkerConnection>> connection =
          WorkerConnection::Open(address);
      if (!connection.ok()) {
        outcome_ = connection.status();
      } else {
        DispatchCallbacks callbacks;
        callbacks.on_accepted = [this] {
          accepted_ = true;
          settled_.Notify();
        };
        callbacks.on_output = [this](OutputStream stream,
                                     std::string_view data) {
          absl::MutexLock lock(&mu_);
          if (stream == OutputStream::kStdout) out_.append(data);
        };
        outcome_ = (*connection)->Dispatch(request, callbacks, timeout);
      }
      if (!accepted_) settled_.Notify();
    });
    EXPECT_TRUE(settled_.WaitForNotificationWithTimeout(absl::Seconds(30)))
        << "no answer to the dispatch in 30 s";
    EXPECT_TRUE(accepted_ || !settled_.HasBeenNotified())
        << "the worker did not accept the job: " << outcome_.status();
  }
  ~BackgroundDispatch() {
    if (thread_.joinable()) thread_.join();
  }
  BackgroundDispatch(const BackgroundDispatch&) = delete;
  BackgroundDispatch& operator=(const BackgroundDispatch&) = delete;

  // Outcome waits for the call to end and returns what it returned.
  absl::StatusOr<JobOutcome> Outcome() {
    if (thread_.joinable()) thread_.join();
    return outcome_;
  }

  // out returns the job's stdout so far (all of it once Outcome returned).
  std::string out() {
    absl::MutexLock lock(&mu_);
    return out_;
  }

 private:
  // Notified once: when the job was accepted, or when the call ended
  // without that.
  absl::Notification settled_;
  std::atomic<bool> accepted_{false};
  absl::Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  // Written by thread_ as the call ends (before settled_, if unaccepted).
  absl::StatusOr<JobOutcome> outcome_;
  std::thread thread_;
};

}  // namespace cfdb::worker::test_support

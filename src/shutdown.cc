#include "cfdb/worker/shutdown.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

namespace internal {
struct ShutdownState {
  absl::Mutex mu;
  StopCause cause ABSL_GUARDED_BY(mu) = StopCause::kNone;
};
}  // namespace internal

std::string_view StopCauseName(StopCause cause) {
  switch (cause) {
    case StopCause::kNone: return "none";
    case StopCause::kRequested: return "requested";
    case StopCause::kSignal: return "signal";
    case StopCause::kStopRpc: return "stop rpc";
  }
  return "unknown";
}

Watcher::Watcher(std::shared_ptr<internal::ShutdownState> state)
    : state_(std::move(state)) {}

bool Watcher::stop_requested() const { return cause() != StopCause::kNone; }

StopCause Watcher::cause() const {
  absl::MutexLock lock(&state_->mu);
  return state_->cause;
}

bool Watcher::WaitUntil(TimePoint deadline) const {
  absl::MutexLock lock(&state_->mu);
  auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(state_->mu) {
    return state_->cause != StopCause::kNone;
  };
  while (!stopped()) {
    const TimePoint now = std::chrono::steady_clock::now();
    if (now >= deadline) return true;
    // absl waits on a relative timeout, so a wall-clock step cannot move it.
    const Duration left = deadline - now;
    const auto timeout = left > std::chrono::hours(24)
                             ? absl::Hours(24)
                             : absl::FromChrono(left);
    state_->mu.AwaitWithTimeout(absl::Condition(&stopped), timeout);
  }
  return false;
}

Shutdown::Shutdown() : state_(std::make_shared<internal::ShutdownState>()) {}

Shutdown::~Shutdown() {
  if (signal_thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    signal_thread_.join();
  }
  if (signal_fd_ >= 0) close(signal_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Shutdown::Stop(StopCause cause) {
  absl::MutexLock lock(&state_->mu);
  if (state_->cause == StopCause::kNone) state_->cause = cause;
}

Watcher Shutdown::watcher() const { return Watcher(state_); }

absl::Status Shutdown::ListenForSignals(std::function<void(int)> on_repeat) {
  if (signal_thread_.joinable()) {
    return absl::FailedPreconditionError("already listening for signals");
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (int err = pthread_sigmask(SIG_BLOCK, &signals, nullptr); err != 0) {
    return absl::InternalError(absl::StrCat("pthread_sigmask: ", strerror(err)));
  }
  signal_fd_ = signalfd(-1, &signals, SFD_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("signalfd: ", strerror(errno)));
  }
  signal_thread_ = std::thread([this, on_repeat = std::move(on_repeat)] {
    int count = 0;
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (true) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("signal listener: poll: {}", strerror(errno));
        return;
      }
      if (fds[1].revents != 0) return;
      signalfd_siginfo info;
      if (read(signal_fd_, &info, sizeof info) != sizeof info) continue;
      ++count;
      spdlog::info("received {} (signal {} of this process)",
                   strsignal(static_cast<int>(info.ssi_signo)), count);
      if (count == 1) {
        Stop(StopCause::kSignal);
      } else if (on_repeat) {
        on_repeat(count);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace cfdb::worker

#include "cfdb/worker/shutdown.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/errno_text.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

namespace internal {
struct ShutdownState {
  absl::Mutex mu;
  StopCause cause ABSL_GUARDED_BY(mu) = StopCause::kNone;
  uint64_t wakes ABSL_GUARDED_BY(mu) = 0;  // Shutdown::Wake() calls
  CondVar stopped;  // signalled when `cause` or `wakes` changes
};
}  // namespace internal

std::string_view SignalName(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

std::string_view StopCauseName(StopCause cause) {
  switch (cause) {
    case StopCause::kNone:
      return "none";
    case StopCause::kRequested:
      return "requested";
    case StopCause::kSignal:
      return "signal";
    case StopCause::kStopRpc:
      return "stop rpc";
  }
  return "unknown";
}

absl::Status BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (int err = pthread_sigmask(SIG_BLOCK, &signals, nullptr); err != 0) {
    return absl::InternalError(
        absl::StrCat("pthread_sigmask: ", ErrnoText(err)));
  }
  return absl::OkStatus();
}

Watcher::Watcher(std::shared_ptr<internal::ShutdownState> state)
    : state_(std::move(state)) {
  absl::MutexLock lock(&state_->mu);
  seen_wakes_ = state_->wakes;
}

bool Watcher::stop_requested() const { return cause() != StopCause::kNone; }

StopCause Watcher::cause() const {
  absl::MutexLock lock(&state_->mu);
  return state_->cause;
}

bool Watcher::WaitUntil(TimePoint deadline) const {
  absl::MutexLock lock(&state_->mu);
  // On the monotonic clock (see CondVar): absl's own timed waits follow the
  // wall clock in the abseil we build with.
  state_->stopped.AwaitUntil(
      state_->mu, deadline, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
        return state_->cause != StopCause::kNone ||
               state_->wakes != seen_wakes_;
      });
  seen_wakes_ = state_->wakes;
  return state_->cause == StopCause::kNone;
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
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->cause != StopCause::kNone) return;
    state_->cause = cause;
  }
  state_->stopped.SignalAll();
}

void Shutdown::Wake() {
  {
    absl::MutexLock lock(&state_->mu);
    ++state_->wakes;
  }
  state_->stopped.SignalAll();
}

Watcher Shutdown::watcher() const { return Watcher(state_); }

absl::Status Shutdown::ListenForSignals(
    std::function<void(int signo, int count)> on_signal) {
  if (signal_thread_.joinable()) {
    return absl::FailedPreconditionError("already listening for signals");
  }
  if (absl::Status s = BlockStopSignals(); !s.ok()) return s;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  signal_fd_ = signalfd(-1, &signals, SFD_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("signalfd: ", ErrnoText(errno)));
  }
  signal_thread_ = std::thread([this, on_signal = std::move(on_signal)] {
    int count = 0;
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (true) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        spdlog::error("signal listener: poll: {}", ErrnoText(errno));
        return;
      }
      if (fds[1].revents != 0) return;
      signalfd_siginfo info;
      if (read(signal_fd_, &info, sizeof info) != sizeof info) continue;
      ++count;
      const int signo = static_cast<int>(info.ssi_signo);
      spdlog::info("received {} (signal {} of this process)", SignalName(signo),
                   count);
      if (on_signal) on_signal(signo, count);
      Stop(StopCause::kSignal);
    }
  });
  return absl::OkStatus();
}

}  // namespace cfdb::worker

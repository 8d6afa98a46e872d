// Cooperative shutdown: one place where a stop is requested, any number of
// watchers that observe it from any thread.
//
//   Shutdown shutdown;
//   if (auto s = shutdown.ListenForSignals(); !s.ok()) { ... }
//   Watcher watcher = shutdown.watcher();
//   while (!watcher.stop_requested()) {
//     DoSomeWork();
//     if (!SteadyClock::Get().WaitUntil(next_turn, watcher)) break;
//   }
//
// A stop is something someone asked for: destroying a Shutdown never
// requests one (a moved or dropped value must not turn a long-running
// process into one that exits at once).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// StopCause says who asked for the stop. The first request wins; later ones
// do not change the cause.
enum class StopCause {
  kNone,       // no stop requested yet
  kRequested,  // code called Shutdown::Stop()
  kSignal,     // SIGTERM or SIGINT
  kStopRpc,    // a client called the worker's Stop RPC
};

// StopCauseName returns a stable lower-case name ("signal", "stop rpc", ...).
std::string_view StopCauseName(StopCause cause);

// SignalName returns "SIGTERM" or "SIGINT" (the signals a Shutdown listens
// for), "a signal" for any other.
std::string_view SignalName(int signo);

// BlockStopSignals blocks SIGTERM and SIGINT in the calling thread, so that
// threads it starts later inherit the mask and only a Shutdown's listener
// (ListenForSignals) receives them. INTERNAL if the mask cannot be set.
absl::Status BlockStopSignals();

namespace internal {
struct ShutdownState;
}  // namespace internal

// Watcher observes a Shutdown. Cheap to copy; safe for concurrent use; keeps
// the shared state alive, so it may outlive its Shutdown.
class Watcher final : public StopToken {
 public:
  // stop_requested returns true once any stop was requested.
  bool stop_requested() const override;

  // cause returns the first stop's cause, or kNone.
  StopCause cause() const;

  // WaitUntil blocks until a stop is requested, the monotonic clock
  // reaches `deadline` or Shutdown::Wake() is called (at once if a Wake
  // came since this watcher's last wait, or its making, so none is lost).
  // Returns false if a stop was requested (it wakes within microseconds of
  // the request), true otherwise (the deadline passed, or a wake: callers
  // check the time).
  bool WaitUntil(TimePoint deadline) const override;

 private:
  friend class Shutdown;
  explicit Watcher(std::shared_ptr<internal::ShutdownState> state);
  std::shared_ptr<internal::ShutdownState> state_;
  // The wakes this watcher has seen; read and written under the state's
  // mutex.
  mutable uint64_t seen_wakes_ = 0;
};

// Shutdown is the source of a stop. Thread-safe. Not copyable or movable.
class Shutdown {
 public:
  Shutdown();
  // Does not request a stop. Stops the signal listener thread, if any.
  ~Shutdown();
  Shutdown(const Shutdown&) = delete;
  Shutdown& operator=(const Shutdown&) = delete;

  // Stop requests a stop with `cause` (idempotent: the first cause wins) and
  // wakes every waiting watcher.
  void Stop(StopCause cause = StopCause::kRequested);

  // Wake ends every watcher's wait in progress without requesting a stop,
  // so that it looks again at what it waits for (e.g. the serve loop, told
  // that gRPC could not accept a connection).
  void Wake();

  // watcher returns a new watcher of this shutdown.
  Watcher watcher() const;

  // ListenForSignals starts a thread that turns SIGTERM and SIGINT into
  // Stop(kSignal). Every signal, the first included, first calls
  // `on_signal` (if set) on that thread with the signal number and the count
  // of signals so far (1, 2, ...). It blocks both signals in the calling
  // thread, so call it before starting other threads (they inherit the
  // mask). Returns FAILED_PRECONDITION if already listening, INTERNAL if the
  // signal descriptor cannot be made.
  absl::Status ListenForSignals(
      std::function<void(int signo, int count)> on_signal = {});

 private:
  std::shared_ptr<internal::ShutdownState> state_;
  int signal_fd_ = -1;
  int wake_fd_ = -1;
  std::thread signal_thread_;
};

}  // namespace cfdb::worker

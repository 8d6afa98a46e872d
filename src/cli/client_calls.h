// What every client command shares: connecting with the command's
// credentials, and retrying transient failures with a short backoff.
#pragma once

#include <chrono>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/limits.h"
#include "cli/commands.h"
#include "serve/backoff.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {

// WithRetries calls `call` until it succeeds, fails with other than a
// transient error, or `attempts` calls were made, waiting kRetryInitialDelay
// up to kRetryMaxDelay (cfdb/worker/limits.h) between calls. A job the worker
// accepted is never sent twice: a failure after acceptance is not transient.
template <typename Call>
auto WithRetries(int attempts, Rpc rpc, Call call) -> decltype(call()) {
  Backoff backoff(kRetryInitialDelay, Backoff::kDefaultFactor, kRetryMaxDelay);
  for (int attempt = 1;; ++attempt) {
    auto result = call();
    if (result.ok() || attempt >= attempts ||
        !IsTransient(ClassifyError(rpc, result.status()))) {
      return result;
    }
    const Duration delay = backoff.Failed();
    spdlog::warn("attempt {} of {} failed: {}; retrying in {:.1f} s", attempt,
                 attempts, result.status().ToString(), ToSeconds(delay));
    // On the monotonic clock; Ctrl-C ends a client through its default
    // disposition.
    std::this_thread::sleep_for(delay);
  }
}

// StopDeadline is the default deadline of a Stop call with `grace_seconds`:
// the grace and a minute more, or a day when the drain has no limit.
inline Duration StopDeadline(double grace_seconds) {
  return grace_seconds < 0 ? Duration(std::chrono::hours(24))
                           : ToDuration(Seconds(grace_seconds + 60));
}

// Explained returns the failed `status` of `rpc` to `address`, made with
// `options`, with what it does not say itself: the one place a client
// command's failure is explained, shared by every command and reap. A
// plaintext call that failed at the transport ("Socket closed") to a
// worker that answers TLS (SpeaksTls, 2 s at most) says "the worker at X
// speaks TLS: pass --tls-ca, --tls-cert and --tls-key", which also makes it
// a handshake error (errors.h); a TLS call that met plaintext (OpenSSL's
// "wrong version number") says "the worker at X answers plaintext, not
// TLS".
absl::Status Explained(Rpc rpc, const std::string& address,
                       const ClientOptions& options,
                       const absl::Status& status);

// Fail reports a failed call of `rpc` in one line on stderr (Explained, its
// kind, its code and what the kind means for the job) and returns its exit
// code (ExitCodeFor).
int Fail(Rpc rpc, const ClientOptions& options, const absl::Status& failed);

// WriteAll writes `data` to `fd`, all of it unless the reader went away.
void WriteAll(int fd, std::string_view data);

// Connect opens a connection to `address` with the command's credentials.
inline absl::StatusOr<std::unique_ptr<WorkerConnection>> Connect(
    const std::string& address, const ClientOptions& options) {
  return WorkerConnection::Open(address, options.credentials);
}

}  // namespace cfdb::worker::cli

// AbuseGuard: what gRPC 1.51 does not do against a hostile client on one
// connection, done from the outside. Its HTTP/2 transport has no defence
// against the rapid-reset pattern (CVE-2023-44487: HEADERS then RST_STREAM,
// in a loop): every reset stream still becomes a call the server must
// create, deliver and destroy, and memory grows by hundreds of MiB a
// second. Each such call reaches our handlers without a request (they are
// raw, see calls.h), so the guard counts them per connection and cuts a
// connection past the limit: it aborts its socket, found by the peer
// address gRPC reports, so gRPC itself tears the transport down.
//
// The count comes late, and the guard cannot make it sooner: gRPC 1.51
// reads a connection on one thread for as long as bytes are waiting, and
// the handlers of the calls it made meanwhile are queued behind that loop
// on the same thread. A flood keeps bytes waiting, so thousands of streams
// become calls before the first is counted (docs/SECURITY.md). What the
// guard does bound is what comes after the cut: nothing more is read.
#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "core/log_throttle.h"

namespace cfdb::worker {

// A connection may end this many calls before their request arrived within
// kResetWindow; more is an attack (a real client cancels a call before
// sending its request only when it gives up, a few times a second at most).
inline constexpr int kMaxResetsPerWindow = 200;
inline constexpr Duration kResetWindow = std::chrono::seconds(1);

// AbuseGuard is shared by every handler of one server. Thread-safe.
class AbuseGuard {
 public:
  // Cuts are logged through `log`, which must outlive this.
  explicit AbuseGuard(LogThrottle& log) : log_(log) {}

  // ResetBeforeRequest notes a call from `peer` (gRPC's peer string, e.g.
  // "ipv4:10.0.0.5:41234", one per connection) whose stream ended before
  // its request arrived; cuts the connection past the limit, logging it
  // through the throttle (one line per period for every cut connection,
  // with a count: an attacker who reconnects cannot flood the log).
  void ResetBeforeRequest(const std::string& peer);

  // CutConnection aborts the connection whose remote end is `peer`; returns
  // whether one was found. Exposed for tests.
  static bool CutConnection(const std::string& peer);

 private:
  struct Window {
    TimePoint start;
    int resets = 0;
    bool cut = false;
  };
  LogThrottle& log_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cfdb::worker

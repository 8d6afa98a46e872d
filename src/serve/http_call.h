// One HTTP request to an orchestrator's API (the ECS agent, the Kubernetes
// API server) through libcurl, loaded on first use (dlopen), not linked: a
// worker that calls no such API, which is most, then starts without mapping
// libcurl and the two dozen libraries it pulls in (TLS, LDAP, Kerberos,
// ...), which cost it about a third of its cold start and resident memory.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"

namespace cfdb::worker {

struct HttpRequest {
  std::string method;  // "PUT", "PATCH", ...
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  Duration timeout = std::chrono::seconds(5);  // the whole call
  // Empty: plain http:// only. Else https:// only, the server verified
  // against this CA bundle.
  std::string ca_file;
  // The call is abandoned soon after this becomes true (may be null).
  const std::atomic<bool>* cancel = nullptr;
};

struct HttpAnswer {
  long status = 0;   // the HTTP status code
  std::string body;  // its first 64 KiB
};

// Perform makes `request`, never through a proxy of the environment (the
// APIs it is for are local to the task or the cluster). Returns the answer
// whatever its status; UNAVAILABLE when there was none (not reached, timed
// out, TLS failed, or cancelled), FAILED_PRECONDITION naming what is
// missing when libcurl.so.4 cannot be loaded. Thread-safe.
absl::StatusOr<HttpAnswer> Perform(const HttpRequest& request);

}  // namespace cfdb::worker

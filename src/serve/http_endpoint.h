// HttpEndpoint: the worker's one plain-HTTP port, off by default
// (--http-port), for what cannot speak gRPC with mutual TLS: a Prometheus
// scraper and an orchestrator's HTTP probes. civetweb serves it (Debian's
// libcivetweb; no HTTP code of ours); it answers three read-only paths and
// nothing else:
//
//   GET /metrics   200, the Prometheus text exposition format 0.0.4
//   GET /healthz   200 while healthy(), else 503
//   GET /readyz    200 while ready(), else 503
//   another path   404;  another method on these   405 (Allow: GET, HEAD)
//
// HEAD is GET without the body. Bounded like the gRPC port: kHttpThreads
// connections are served at once (more wait in the listen queue), a
// request's head may be kHttpMaxRequestBytes, and one that has not arrived
// whole within kHttpRequestTimeout is dropped (a client sending a byte a
// second does not hold a thread). No keep-alive: a scrape is a connection.
// civetweb's own complaints go through the client log throttle.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "core/log_throttle.h"

struct mg_context;
struct mg_connection;

namespace cfdb::worker {

inline constexpr int kHttpThreads = 4;
inline constexpr int kHttpMaxRequestBytes = 8 << 10;
inline constexpr Duration kHttpRequestTimeout = std::chrono::seconds(5);

// What the paths answer with, called on civetweb's threads, concurrently:
// each must be thread-safe and quick.
struct HttpHandlers {
  std::function<std::string()> metrics;
  std::function<bool()> healthy;
  std::function<bool()> ready;
};

class HttpEndpoint {
 public:
  // Start listens on `host`:`port` (0: a free port, see port()) and serves
  // until destroyed. `log` must outlive this. Errors: FAILED_PRECONDITION
  // naming the address and civetweb's reason (e.g. the port is in use).
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(
      const std::string& host, int port, HttpHandlers handlers,
      LogThrottle& log);
  // Stops listening and waits for the requests being served.
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // port is the port it listens on.
  int port() const { return port_; }

 private:
  HttpEndpoint(HttpHandlers handlers, LogThrottle& log)
      : handlers_(std::move(handlers)), log_(log) {}
  static int OnRequest(mg_connection* connection);
  static int OnLog(const mg_connection* connection, const char* message);
  int Answer(mg_connection* connection) const;

  const HttpHandlers handlers_;
  LogThrottle& log_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace cfdb::worker

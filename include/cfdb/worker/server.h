// WorkerServer puts a Worker on the network as the gRPC service
// cfdb.worker.v1.Worker (proto/cfdb/worker/v1/worker.proto), next to gRPC's
// standard health service grpc.health.v1.Health (gRPC's built-in one, see
// gRPC's doc/health-checking.md): SERVING while the worker accepts work,
// NOT_SERVING from the moment its drain begins.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/worker.h"

namespace cfdb::worker {

// HTTP/2 keepalive for a job runner, whose calls may stay silent for hours
// while their jobs run (gRPC's doc/keepalive.md names the knobs).
//
// kMinClientPingInterval: a client may ping this often, with or without
// calls and data, without a strike. Clients behind NATs and load balancers
// ping every 10 to 60 s; gRPC's default policy (one ping per 5 minutes
// without data, then GOAWAY "too_many_pings") would cut their silent jobs
// off. Half the 10 s we tell clients to use, so timer jitter never strikes.
inline constexpr Duration kMinClientPingInterval = std::chrono::seconds(5);
// kKeepaliveTime and kKeepaliveTimeout: the server pings a connection after
// this long without activity, and closes it when the ping is not answered
// in time, so a client that vanished without closing (host gone, network
// cut) is noticed and its job cancelled within 30 + 10 s.
inline constexpr Duration kKeepaliveTime = std::chrono::seconds(30);
inline constexpr Duration kKeepaliveTimeout = std::chrono::seconds(10);

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see WorkerServer::port).
  std::string address = "127.0.0.1:0";
  Credentials credentials;
  // Called when a Stop RPC arrives, after its request reached the worker
  // (e.g. to wake the serve loop). Runs on a gRPC thread; must not block.
  std::function<void()> on_stop_rpc;
  // The server's own keepalive pings (see kKeepaliveTime); tests shorten
  // them.
  Duration keepalive_time = kKeepaliveTime;
  Duration keepalive_timeout = kKeepaliveTimeout;
};

// WorkerServer serves one Worker. Thread-safe. Does not own the worker, which
// must outlive the server.
class WorkerServer {
 public:
  // Start listens on `options.address` and starts serving. Errors:
  // UNAVAILABLE when the address cannot be bound (in use, bad host).
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      Worker& worker, ServerOptions options);

  // Shuts down with a zero deadline if Shutdown was not called.
  ~WorkerServer();

  // port returns the port the server listens on.
  int port() const { return port_; }

  // Shutdown lets Dispatch and Stop calls in progress finish for up to
  // `wait` (on the monotonic clock), then stops serving: calls still open
  // are cancelled and client connections closed. Returns when done.
  // Idempotent.
  void Shutdown(Duration wait);

 private:
  class Impl;
  WorkerServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace cfdb::worker

// WorkerServer puts a Worker on the network as the gRPC service
// cfdb.worker.v1.Worker (proto/cfdb/worker/v1/worker.proto), next to gRPC's
// standard health service grpc.health.v1.Health (gRPC's
// doc/health-checking.md; served by the worker itself, so that it passes
// the same admission): SERVING while the worker accepts work, NOT_SERVING
// from the moment its drain begins.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/limits.h"
#include "cfdb/worker/rpcs.h"
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

// AdmissionLists say who may call what, by the identities (SAN DNS names
// and URIs, never the Common Name) of the caller's client certificate; see
// docs/SECURITY.md. Both empty: every peer the TLS handshake let in may call
// everything. Otherwise a peer with an identity in `control` may call every
// method, one in `observe` only the RPCs whose registry row says
// MethodGroup::kObserve (rpcs.h; docs/TLS.md has the table), and any other
// gets PERMISSION_DENIED naming the method and the identities it presented.
struct AdmissionLists {
  std::vector<std::string> control;  // every RPC
  std::vector<std::string> observe;  // the RPCs of MethodGroup::kObserve
  // Every RPC, on every job: another identity's jobs too (JobCaller).
  std::vector<std::string> admin;
  bool empty() const {
    return control.empty() && observe.empty() && admin.empty();
  }
};

// ServerLimits bound what any client can make the server hold, with gRPC's
// own knobs (docs/SECURITY.md, "Limits", says why each value).
struct ServerLimits {
  // A connection must finish its TLS and HTTP/2 handshake within this
  // (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS; gRPC's default is 120 s).
  Duration handshake_timeout = std::chrono::seconds(5);
  // A connection with no call open for this long is closed with GOAWAY
  // (GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients reconnect transparently.
  Duration max_connection_idle = std::chrono::minutes(2);
  // Streams one connection may have open at once
  // (GRPC_ARG_MAX_CONCURRENT_STREAMS); 0 means the worker's
  // max_concurrent_tasks plus kControlStreams.
  int max_concurrent_streams = 0;
  // What the server's connections and calls may allocate in all
  // (grpc::ResourceQuota); past it gRPC refuses new streams and shrinks
  // flow-control windows.
  std::size_t memory_quota_bytes = std::size_t{256} << 20;
  // The largest request message accepted (RESOURCE_EXHAUSTED beyond).
  int max_receive_message_bytes = kMaxMessageBytes;
};

// kControlStreams is the room per connection for Idle, Stop and health
// calls beside a full docket's Dispatch streams.
inline constexpr int kControlStreams = 16;

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
  AdmissionLists admit;
  ServerLimits limits;
  // Also listen on a Unix domain socket at this path (empty: none), without
  // TLS: the file is created owner-only (0600), so only the worker's own
  // user (or root) can connect, and callers there pass admission as the
  // worker itself would. A stale file of a crashed run is replaced; one a
  // live process accepts on is refused (FAILED_PRECONDITION from Start).
  // The file is removed on Shutdown.
  std::string unix_socket;
  // Also serve `idle` and `stop` of wool.runtime.protobuf.wire.Worker
  // (proto/wool/runtime/protobuf/wire/worker.proto), the service name the
  // Python worker library Wool's fleet tooling calls, on the same docket
  // and drain; its StopRequest.timeout is the drain grace.
  bool wool_compat = false;
};

// ServeStatus is what the serve loop knows of its worker that the server
// does not, for the Status RPC (WorkerServer::OnStatus).
struct ServeStatus {
  std::string version;
  // Since the worker started, on the monotonic clock.
  Duration uptime = Duration::zero();
  // When the worker retires if nothing changes (Unix seconds) and by which
  // rule ("idle" or "max_lifetime"); none when neither applies.
  std::optional<double> retires_at_unix_seconds;
  std::string retirement_rule;
  bool scale_in_protected = false;
  // The identity it serves as (the SAN its clients verify); "" without.
  std::string identity;
};

// RpcCounts is what a server answered since it started, for the metrics
// (docs/METRICS.md: cfdb_worker_rpcs_total and
// cfdb_worker_admission_refusals_total).
struct RpcCounts {
  // gRPC's status codes, 0 (OK) .. 16 (UNAUTHENTICATED).
  static constexpr std::size_t kCodes = 17;
  // Calls by RPC (kRpcs' order, rpcs.h; the last row: methods the worker
  // does not serve) and the code the client was answered with.
  std::array<std::array<uint64_t, kCodes>, std::size(kRpcs) + 1> calls{};
  // Calls admission refused (PERMISSION_DENIED), by MethodGroup.
  std::array<uint64_t, kMethodGroupCount> admission_refusals{};
};

// WorkerServer serves one Worker. Thread-safe. Does not own the worker, which
// must outlive the server.
class WorkerServer {
 public:
  // Start listens on `options.address` (and `options.unix_socket`) and
  // starts serving. Errors: UNAVAILABLE when the address cannot be bound (in
  // use, bad host); INVALID_ARGUMENT for admission lists without mutual TLS
  // (there would be no identity to check) or a socket path too long;
  // FAILED_PRECONDITION when a live process listens on the socket path or
  // the path is not a socket.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      Worker& worker, ServerOptions options);

  // Shuts down with a zero deadline if Shutdown was not called.
  ~WorkerServer();

  // port returns the port the server listens on.
  int port() const { return port_; }

  // Shutdown lets Dispatch and Stop calls in progress finish for up to
  // `wait` (on the monotonic clock), then stops serving: calls still open
  // are cancelled and client connections closed, and the Unix socket file
  // removed. Returns when done. Idempotent.
  void Shutdown(Duration wait);

  // OnStatus sets where Status calls get the serve loop's part of their
  // answer; it is called on gRPC's threads, once per call, and must be
  // thread-safe and quick. Until it is set, Status answers with the
  // server's part only (no version, uptime or retirement). Thread-safe.
  void OnStatus(std::function<ServeStatus()> source);

  // counts returns the calls answered so far. Thread-safe.
  RpcCounts counts() const;

  // NotServing turns the health service NOT_SERVING without stopping (the
  // serve loop's "listener lost"). Idempotent.
  void NotServing();

 private:
  class Impl;
  WorkerServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace cfdb::worker

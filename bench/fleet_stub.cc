// fleet-stub: a stand-in for a fleet of idle workers, for measuring `reap`
// where thousands of real workers would not fit: one process serving
// cfdb.worker.v1.Worker on N ports of 127.0.0.1, each answering Idle with a
// constant and Stop at once (drained 0, cancelled 0), as an idle worker
// does, but without exiting. Prints "listening on 127.0.0.1:PORT" per port
// on stdout, then "ready", and serves until killed.
//
//   fleet-stub [--ports N] [--idle-seconds S] [--tls DIR]
//
// Defaults: 1 port, idle 3600 s, plaintext. --tls: mutual TLS, as workers
// serve it, from DIR/ca.pem, DIR/server.pem and DIR/server.key.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace {

namespace v1 = ::cfdb::worker::v1;

class IdleWorkers final : public v1::Worker::CallbackService {
 public:
  explicit IdleWorkers(double idle_seconds) : idle_seconds_(idle_seconds) {}

  grpc::ServerUnaryReactor* Idle(grpc::CallbackServerContext* ctx,
                                 const v1::IdleRequest*,
                                 v1::IdleTime* reply) override {
    reply->set_seconds(idle_seconds_);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* ctx,
                                 const v1::StopRequest*,
                                 v1::StopReply*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const double idle_seconds_;
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "fleet-stub: cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Credentials serves plaintext, or with `tls_dir` mutual TLS.
std::shared_ptr<grpc::ServerCredentials> Credentials(
    const std::string& tls_dir) {
  if (tls_dir.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = Read(tls_dir + "/ca.pem");
  options.pem_key_cert_pairs.push_back(
      {Read(tls_dir + "/server.key"), Read(tls_dir + "/server.pem")});
  return grpc::SslServerCredentials(options);
}

}  // namespace

int main(int argc, char** argv) {
  int ports = 1;
  double idle_seconds = 3600;
  std::string tls_dir;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ports") == 0 && i + 1 < argc) {
      ports = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--idle-seconds") == 0 && i + 1 < argc) {
      idle_seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--tls") == 0 && i + 1 < argc) {
      tls_dir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ports N] [--idle-seconds S] [--tls DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  // A listening socket per port, and a connection per client in flight.
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);

  IdleWorkers service(idle_seconds);
  grpc::ServerBuilder builder;
  const std::shared_ptr<grpc::ServerCredentials> credentials =
      Credentials(tls_dir);
  std::vector<int> selected(static_cast<size_t>(ports), 0);
  for (int& port : selected) {
    builder.AddListeningPort("127.0.0.1:0", credentials, &port);
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::fprintf(stderr, "fleet-stub: cannot listen on %d ports\n", ports);
    return 1;
  }
  for (const int port : selected) {
    if (port == 0) {
      std::fprintf(stderr, "fleet-stub: a port could not be bound\n");
      return 1;
    }
    std::printf("listening on 127.0.0.1:%d\n", port);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  server->Wait();
  return 0;
}

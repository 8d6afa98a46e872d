// bare-server: the whole-process floor for cold start and resident memory. A
// minimal callback server for cfdb.worker.v1.Worker that answers Idle with a
// constant, announces itself with the same "listening on" line as
// `cfdb-worker serve`, and dies on SIGTERM's default action.
//
//   bare-server [--port N]   (default 0: pick a free port)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bare_service.h"

int main(int argc, char** argv) {
  int port = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--port N]\n", argv[0]);
      return 2;
    }
  }
  cfdb::worker::bench::BareService service;
  std::unique_ptr<grpc::Server> server = cfdb::worker::bench::StartBareServer(
      service, "127.0.0.1:" + std::to_string(port), &port);
  if (server == nullptr) {
    std::fprintf(stderr, "cannot listen on port %d\n", port);
    return 1;
  }
  std::fprintf(stderr, "listening on 127.0.0.1:%d (pid %d)\n", port,
               static_cast<int>(getpid()));
  server->Wait();
  return 0;
}

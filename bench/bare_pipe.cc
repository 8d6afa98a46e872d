// bare-pipe: the floor for streaming a job's output and input through gRPC.
// The same proto and the same shape as `cfdb-worker serve` + `dispatch`,
// with nothing else: a sync-API server on plaintext 127.0.0.1 that spawns
// the program and copies its pipes to and from the call, and a client that
// copies the call to and from its own stdin and stdout. No docket, job
// thread, poll loop, limits, TLS or log line.
//
//   bare-pipe serve [--port N]      (default 0: pick a free port; announces
//                                    "listening on 127.0.0.1:PORT")
//   bare-pipe client ADDRESS [--stdin] -- PROGRAM ARGS...
//       Dispatch (or, with --stdin, DispatchStream fed from stdin); the job's
//       stdout to stdout; exits with the job's code (128 + signal).
//
// Chunk sizes are the worker's: the server reads the program's stdout (a
// pipe of 1 MiB) up to 1 MiB per read, one Output message per read; the
// client sends what its stdin has at once, up to 256 KiB per message; the
// program's stdin is a pipe of 1 MiB.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cfdb/worker/limits.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace {

namespace v1 = ::cfdb::worker::v1;

// The worker's own sizes (cfdb/worker/limits.h).
using ::cfdb::worker::kJobPipeBytes;
using ::cfdb::worker::kOutputChunkBytes;
using ::cfdb::worker::kStdinChunkBytes;

// WriteAll writes all of `data` to `fd`; false on an error (EPIPE included).
bool WriteAll(int fd, const std::string& data) {
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Program is a spawned job: its pid, stdin pipe (-1: /dev/null) and stdout
// pipe; stderr goes to /dev/null. Like the worker's jobs it gets an empty
// environment and PATH lookup in the server's own PATH.
struct Program {
  pid_t pid = -1;
  int in = -1;
  int out = -1;
};

Program Spawn(const v1::ExecSpec& exec, bool pipe_stdin) {
  Program p;
  int in[2] = {-1, -1};
  int out[2];
  if ((pipe_stdin && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0)
    return p;
  fcntl(out[0], F_SETPIPE_SZ, kJobPipeBytes);
  if (pipe_stdin) fcntl(in[1], F_SETPIPE_SZ, kJobPipeBytes);  // as exec.cc
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (pipe_stdin) {
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (const std::string& a : exec.argv())
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* no_env[] = {nullptr};
  if (posix_spawnp(&p.pid, argv[0], &actions, nullptr, argv.data(), no_env) !=
      0) {
    p.pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  p.out = out[0];
  if (pipe_stdin) {
    close(in[0]);
    p.in = in[1];
  }
  return p;
}

// RunOutput writes `accepted`, then the program's stdout as Output events,
// one per read, then reaps it and writes `exit`. `Writer` is the call's
// writer (server-streaming or bidi).
template <typename Writer>
grpc::Status RunOutput(const Program& p, Writer& writer) {
  if (p.pid < 0) return grpc::Status(grpc::StatusCode::INTERNAL, "spawn");
  v1::DispatchEvent event;
  event.mutable_accepted();
  writer.Write(event);
  std::unique_ptr<char[]> buffer(new char[kOutputChunkBytes]);
  v1::Output* output = event.mutable_output();
  output->set_stream(v1::Output::STDOUT);
  for (ssize_t n; (n = read(p.out, buffer.get(), kOutputChunkBytes)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output->set_data(buffer.get(), static_cast<std::size_t>(n));
    if (!writer.Write(event)) break;  // the client is gone; still reap
  }
  close(p.out);
  int status = 0;
  while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    event.mutable_exit()->set_signal(WTERMSIG(status));
  } else {
    event.mutable_exit()->set_code(WEXITSTATUS(status));
  }
  writer.Write(event);
  return grpc::Status::OK;
}

class BarePipeService final : public v1::Worker::Service {
 public:
  grpc::Status Dispatch(
      grpc::ServerContext*, const v1::DispatchRequest* request,
      grpc::ServerWriter<v1::DispatchEvent>* writer) override {
    return RunOutput(Spawn(request->exec(), /*pipe_stdin=*/false), *writer);
  }

  // DispatchStream: a thread writes the stdin chunks into the program's
  // stdin (blocking writes: the pipe's room is the flow control) and closes
  // it at end_of_input; this one copies the output back.
  grpc::Status DispatchStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DispatchEvent, v1::DispatchInput>* stream)
      override {
    v1::DispatchInput input;
    if (!stream->Read(&input) || !input.has_request()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request");
    }
    const Program p = Spawn(input.request().exec(), /*pipe_stdin=*/true);
    std::thread feeder([stream, fd = p.in] {
      v1::DispatchInput chunk;
      while (stream->Read(&chunk) && chunk.has_stdin() &&
             WriteAll(fd, chunk.stdin())) {
      }
      close(fd);
    });
    grpc::Status status = RunOutput(p, *stream);
    feeder.join();
    return status;
  }
};

int Serve(int port) {
  BarePipeService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port),
                           grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "bare-pipe: cannot listen\n");
    return 1;
  }
  std::fprintf(stderr, "listening on 127.0.0.1:%d (pid %d)\n", port,
               static_cast<int>(getpid()));
  server->Wait();
  return 0;
}

// ReadEvents copies Output events to stdout until the stream ends and
// returns the job's exit code (128 + signal; 1 without an exit event).
// `on_accepted` runs when `accepted` arrives.
template <typename Reader, typename OnAccepted>
int ReadEvents(Reader& reader, OnAccepted on_accepted) {
  int code = 1;
  v1::DispatchEvent event;
  while (reader.Read(&event)) {
    if (event.has_accepted()) {
      on_accepted();
    } else if (event.has_output()) {
      if (!WriteAll(STDOUT_FILENO, event.output().data())) return 1;
    } else if (event.has_exit()) {
      code = event.exit().has_signal() ? 128 + event.exit().signal()
                                       : event.exit().code();
    }
  }
  return code;
}

// PumpStdin sends stdin as `stdin` chunks, each what stdin has at once (up
// to a chunk, as WorkerConnection's pump reads), then `end_of_input` and the
// half-close.
void PumpStdin(
    grpc::ClientReaderWriter<v1::DispatchInput, v1::DispatchEvent>& stream) {
  std::unique_ptr<char[]> buffer(new char[kStdinChunkBytes]);
  v1::DispatchInput message;
  for (bool end = false; !end;) {
    std::size_t got = 0;
    while (got < kStdinChunkBytes) {
      const ssize_t n =
          read(STDIN_FILENO, buffer.get() + got, kStdinChunkBytes - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;  // the job's input is cut short: no end_of_input
      if (n == 0) {
        end = true;
        break;
      }
      got += static_cast<std::size_t>(n);
      pollfd more{STDIN_FILENO, POLLIN, 0};
      if (poll(&more, 1, 0) != 1) break;
    }
    if (got == 0) continue;
    message.set_stdin(buffer.get(), got);
    if (!stream.Write(message)) return;
  }
  message.mutable_end_of_input();
  if (stream.Write(message)) stream.WritesDone();
}

int Client(const std::string& address, bool stream_stdin,
           const std::vector<std::string>& argv) {
  auto stub = v1::Worker::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::DispatchRequest request;
  request.set_job_id("bare-pipe");
  request.set_kind("exec");
  for (const std::string& a : argv) request.mutable_exec()->add_argv(a);
  grpc::ClientContext context;
  int code;
  grpc::Status status;
  if (!stream_stdin) {
    auto reader = stub->Dispatch(&context, request);
    code = ReadEvents(*reader, [] {});
    status = reader->Finish();
  } else {
    auto stream = stub->DispatchStream(&context);
    v1::DispatchInput first;
    *first.mutable_request() = request;
    stream->Write(first);
    // As the worker's client: input is read once the job is accepted.
    std::thread pump;
    code = ReadEvents(*stream,
                      [&] { pump = std::thread([&] { PumpStdin(*stream); }); });
    if (pump.joinable()) pump.join();
    status = stream->Finish();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "bare-pipe: %s\n", status.error_message().c_str());
    return 1;
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" &&
      (argc == 2 || (argc == 4 && std::strcmp(argv[2], "--port") == 0))) {
    return Serve(argc == 4 ? std::atoi(argv[3]) : 0);
  }
  if (mode == "client" && argc > 4) {
    int i = 3;
    const bool stream_stdin = std::strcmp(argv[i], "--stdin") == 0;
    if (stream_stdin) ++i;
    if (i < argc && std::strcmp(argv[i], "--") == 0 && i + 1 < argc) {
      return Client(argv[2], stream_stdin,
                    std::vector<std::string>(argv + i + 1, argv + argc));
    }
  }
  std::fprintf(stderr,
               "usage: %s serve [--port N]\n"
               "       %s client ADDRESS [--stdin] -- PROGRAM ARGS...\n",
               argv[0], argv[0]);
  return 2;
}

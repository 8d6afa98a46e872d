// The idle/stop/dispatch contract over every transport a worker serves
// (TCP plaintext, TCP with mutual TLS, its Unix socket), the socket file's
// life (owner-only, removed on exit, a stale one replaced, a live one
// refused) and Wool's idle and stop behind --wool-compat (issue 14).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/feed.h"
#include "support/loopback.h"
#include "support/raw_call.h"
#include "support/temp_dir.h"
#include "support/test_job.h"
#include "support/test_pki.h"
#include "support/wait_for.h"
#include "wool/runtime/protobuf/wire/worker.grpc.pb.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Command;
using test_support::Daemon;
using test_support::ExecRequest;
using ::testing::HasSubstr;

namespace wool_wire = ::wool::runtime::protobuf::wire;

// ExitedZero says whether a dispatch's job ran and exited 0.
bool ExitedZero(const absl::StatusOr<JobOutcome>& outcome) {
  return outcome.ok() && *outcome == JobOutcome::Exited(0);
}

enum class Transport { kTcp, kTcpMtls, kUnix };

std::string Name(Transport t) {
  switch (t) {
    case Transport::kTcp:
      return "TcpPlaintext";
    case Transport::kTcpMtls:
      return "TcpMutualTls";
    case Transport::kUnix:
      return "UnixSocket";
  }
  return "";
}

// A worker, the address of the transport under test, and the client
// flags and credentials that go with it.
class TransportTest : public ::testing::TestWithParam<Transport> {
 protected:
  TransportTest()
      : worker_pem_(
            pki_.Leaf("worker", {"DNS:worker.cfdb.internal", "IP:127.0.0.1"})),
        client_pem_(pki_.Leaf("api", {"DNS:api.cfdb.internal"})) {}

  std::vector<std::string> ServeArgs() const {
    std::vector<std::string> args = {"--idle-timeout-seconds", "0", "--uds",
                                     socket_};
    if (GetParam() == Transport::kTcpMtls) {
      args.insert(args.end(), {"--tls-ca", pki_.ca().cert, "--tls-cert",
                               worker_pem_.cert, "--tls-key", worker_pem_.key,
                               "--tls-admit-control", "api.cfdb.internal",
                               "--tls-admit-observe", "worker.cfdb.internal"});
    }
    return args;
  }
  std::string AddressOf(const Daemon& daemon) const {
    return GetParam() == Transport::kUnix ? absl::StrCat("unix:", socket_)
                                          : daemon.address();
  }
  Credentials ClientCredentials() {
    return GetParam() == Transport::kTcpMtls ? pki_.Mtls(client_pem_)
                                             : Credentials::Insecure();
  }
  std::vector<std::string> ClientFlags(const Daemon& daemon) const {
    std::vector<std::string> flags = {"--address", AddressOf(daemon)};
    if (GetParam() == Transport::kTcpMtls) {
      flags.insert(flags.end(),
                   {"--tls-ca", pki_.ca().cert, "--tls-cert", client_pem_.cert,
                    "--tls-key", client_pem_.key});
    }
    return flags;
  }

  test_support::TestPki pki_;
  test_support::Pem worker_pem_;
  test_support::Pem client_pem_;
  test_support::TempDir dir_;
  const std::string socket_ = dir_.path("worker.sock");
};

// Idle grows from startup and is 0 while busy; a job's output and exit code
// come back byte-exact; Stop drains the job in flight and the worker exits.
TEST_P(TransportTest, IdleDispatchAndStopKeepTheirContract) {
  Daemon daemon(ServeArgs());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection =
      WorkerConnection::Open(AddressOf(daemon), ClientCredentials());
  ASSERT_TRUE(connection.ok());
  absl::StatusOr<double> first = (*connection)->IdleTime(seconds(5));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(test_support::WaitFor([&] {
    return (*connection)->IdleTime(seconds(5)).value_or(0) - *first >= 0.15;
  })) << "idle accrues from startup";

  std::string out;
  std::string err;
  absl::StatusOr<JobOutcome> outcome =
      (*connection)
          ->Dispatch(ExecRequest({"/bin/sh", "-c",
                                  "printf 'a\\0b'; printf oops >&2; exit 3"}),
                     {.on_output =
                          [&](OutputStream stream, std::string_view bytes) {
                            (stream == OutputStream::kStdout ? out : err)
                                .append(bytes);
                          }},
                     seconds(30));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(3));
  EXPECT_EQ(out, std::string("a\0b", 3));
  EXPECT_EQ(err, "oops");
  // The job's end reaches the client a moment before it leaves the docket.
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return (*connection)->IdleTime(seconds(1)).value_or(0) > 0; }));

  std::thread job([&] {
    EXPECT_TRUE(ExitedZero(
        (*connection)->Dispatch(ExecRequest({"sleep", "3"}), {}, seconds(30))))
        << "drained, not cancelled";
  });
  ASSERT_TRUE(test_support::WaitFor([&] {
    return (*connection)->IdleTime(seconds(1)).value_or(1) == 0;
  })) << "0 while busy";
  absl::StatusOr<StopSummary> stopped =
      (*connection)->Stop(seconds(30), seconds(60));
  job.join();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->drained, 1);
  EXPECT_EQ(stopped->cancelled, 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_FALSE(std::filesystem::exists(socket_)) << "removed on exit";
}

// Streamed stdin comes back byte for byte over every transport, at the
// sizes where chunking could go wrong: none, one byte, around a 64 KiB pipe
// and a few MiB (several chunks of the client, the pipes and gRPC).
TEST_P(TransportTest, StreamedStdinRoundTripsByteForByte) {
  Daemon daemon(ServeArgs());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection =
      WorkerConnection::Open(AddressOf(daemon), ClientCredentials());
  ASSERT_TRUE(connection.ok());
  for (const std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{65535}, std::size_t{65536},
        std::size_t{65537}, std::size_t{8} << 20}) {
    const std::string input = test_support::RandomBytes(size, size);
    test_support::Feed feed(input);
    std::string out;
    absl::StatusOr<JobOutcome> outcome =
        (*connection)
            ->DispatchStream(ExecRequest({"cat"}), feed.read_fd(),
                             {.on_output =
                                  [&](OutputStream, std::string_view bytes) {
                                    out.append(bytes);
                                  }},
                             seconds(60));
    ASSERT_TRUE(outcome.ok()) << size << ": " << outcome.status();
    EXPECT_EQ(*outcome, JobOutcome::Exited(0)) << size;
    EXPECT_EQ(out.size(), input.size());
    EXPECT_TRUE(out == input) << size << " bytes differ";
  }
}

// The client commands speak every transport.
TEST_P(TransportTest, TheClientCommandsSpeakIt) {
  Daemon daemon(ServeArgs());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto run = [&](std::vector<std::string> args) {
    const std::vector<std::string> flags = ClientFlags(daemon);
    args.insert(args.begin() + 1, flags.begin(), flags.end());
    CollectingJob command(Command(args));
    const JobOutcome outcome = RunExec(command);
    return std::make_tuple(outcome, command.out(), command.err());
  };
  auto [idle, idle_out, idle_err] = run({"idle"});
  EXPECT_EQ(idle, JobOutcome::Exited(0)) << idle_err;
  auto [dispatch, out, dispatch_err] =
      run({"dispatch", "--no-stdin", "--", "echo", "over the wire"});
  EXPECT_EQ(dispatch, JobOutcome::Exited(0)) << dispatch_err;
  EXPECT_EQ(out, "over the wire\n");
  JobRequest piped = Command({"dispatch"});
  const std::vector<std::string> flags = ClientFlags(daemon);
  MutableExec(piped).argv.insert(MutableExec(piped).argv.end(), flags.begin(),
                                 flags.end());
  MutableExec(piped).argv.insert(MutableExec(piped).argv.end(),
                                 {"--", "sha256sum"});
  MutableExec(piped).stdin_data = "streamed\n";
  CollectingJob streamed(piped);
  EXPECT_EQ(RunExec(streamed), JobOutcome::Exited(0)) << streamed.err();
  // sha256 of "streamed\n": the bytes went in through the stream.
  EXPECT_THAT(streamed.out(), HasSubstr("d61963faab0bc50062ce03ab42694ab0"));
  auto [health, health_out, health_err] = run({"health"});
  EXPECT_EQ(health, JobOutcome::Exited(0)) << health_err;
  auto [stop, stop_out, stop_err] = run({"stop", "--grace", "5"});
  EXPECT_EQ(stop, JobOutcome::Exited(0)) << stop_err;
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
}

// Jobs are handles on every transport: a dispatch killed mid-job (SIGKILL,
// with a detach grace) leaves its job running; `attach` from another
// process gets all of its output and its own exit code; `jobs` lists what
// the worker holds, with who dispatched it; `cancel` ends one job.
TEST_P(TransportTest, AJobOutlivesItsCallerAndIsReadAgainAndCancelled) {
  Daemon daemon(ServeArgs());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  std::string flags;
  for (const std::string& flag : ClientFlags(daemon))
    absl::StrAppend(&flags, " '", flag, "'");
  const std::string b = absl::StrCat("'", test_support::Binary(), "'");
  // The shell waits for the job to be listed with its dispatch attached
  // (which lasts until the job is let go: a poll, a process of its own, may
  // take longer than a second under ASan at ctest -j6, and a job that ended
  // before one saw it left the loop waiting for ever), kills its dispatch,
  // lets the job end and attaches from another process; it gives up after
  // 600 polls. The dispatch sends no stdin (--no-stdin): a streamed input
  // (a background shell's /dev/null) whose end_of_input had not reached
  // the worker before the kill is cut short, and that cancels the job by
  // design (the CI run that failed this way under load).
  const std::string go = dir_.path("go");
  const std::string script = absl::StrCat(
      b, " dispatch", flags,
      " --job-id handle --detach-grace-seconds -1 --no-stdin -- sh -c "
      "'seq 1 20000; "
      "until [ -e ",
      go, " ]; do sleep 0.05; done; exit 3' >/dev/null & p=$!; n=0; until ", b,
      " jobs", flags, " | grep -q '^handle .* yes'; do n=$((n+1)); ",
      "[ $n -lt 600 ] || exit 9; sleep 0.05; done; kill -9 $p; touch ", go,
      "; ", b, " attach", flags, " handle; echo exit=$?; ", b, " jobs", flags,
      " --format json");
  JobRequest request = ExecRequest({"sh", "-c", script});
  MutableExec(request).time_limit = seconds(120);
  CollectingJob handle(request);
  ASSERT_EQ(RunExec(handle), JobOutcome::Exited(0)) << handle.err();
  std::string numbers;
  for (int i = 1; i <= 20000; ++i) absl::StrAppend(&numbers, i, "\n");
  const std::string out = handle.out();
  EXPECT_EQ(out.substr(0, numbers.size() + 7), numbers + "exit=3\n")
      << handle.err();
  EXPECT_THAT(out,
              HasSubstr(R"("job_id":"handle","kind":"exec","state":"ended")"));
  EXPECT_THAT(out, HasSubstr(absl::StrCat(
                       R"("client":")",
                       GetParam() == Transport::kTcp       ? "plaintext"
                       : GetParam() == Transport::kTcpMtls ? "api.cfdb.internal"
                                                           : "unix socket",
                       R"(","program":"sh")")));

  auto connection =
      WorkerConnection::Open(AddressOf(daemon), ClientCredentials());
  ASSERT_TRUE(connection.ok());
  absl::StatusOr<JobOutcome> running;
  std::thread job([&] {
    running = (*connection)
                  ->Dispatch(
                      [] {
                        JobRequest r = ExecRequest({"sleep", "300"});
                        r.job_id = "sleeper";
                        return r;
                      }(),
                      {}, seconds(60));
  });
  ASSERT_TRUE(test_support::WaitFor([&] {
    auto jobs = (*connection)->ListJobs(seconds(5));
    return jobs.ok() && jobs->size() == 2;
  }));
  std::vector<std::string> cancel = {"cancel"};
  const std::vector<std::string> client = ClientFlags(daemon);
  cancel.insert(cancel.end(), client.begin(), client.end());
  cancel.insert(cancel.end(), {"sleeper", "--grace-seconds", "0"});
  CollectingJob cancelled(Command(cancel));
  EXPECT_EQ(RunExec(cancelled), JobOutcome::Exited(0)) << cancelled.err();
  EXPECT_THAT(cancelled.out(), HasSubstr("job sleeper failed: CANCELLED"));
  job.join();
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->failure, JobOutcome::Failure::kCancelled);
}

// A worker from before DispatchStream (here: a server of the same proto
// implementing Dispatch alone, which echoes the request's stdin): dispatch
// falls back to sending stdin whole in the request, none of it lost.
TEST(OldWorkerTest, DispatchSendsStdinWholeToAWorkerWithoutStreams) {
  class DispatchOnly final : public cfdb::worker::v1::Worker::CallbackService {
    grpc::ServerWriteReactor<cfdb::worker::v1::DispatchEvent>* Dispatch(
        grpc::CallbackServerContext*,
        const cfdb::worker::v1::DispatchRequest* request) override {
      class Echo final
          : public grpc::ServerWriteReactor<cfdb::worker::v1::DispatchEvent> {
       public:
        explicit Echo(const std::string& stdin_bytes) {
          events_[0].mutable_accepted();
          events_[1].mutable_output()->set_stream(
              cfdb::worker::v1::Output::STDOUT);
          events_[1].mutable_output()->set_data(stdin_bytes);
          events_[2].mutable_exit()->set_code(0);
          StartWrite(&events_[0]);
        }
        void OnWriteDone(bool ok) override {
          if (ok && ++next_ < 3) return StartWrite(&events_[next_]);
          Finish(grpc::Status::OK);
        }
        void OnDone() override { delete this; }

       private:
        cfdb::worker::v1::DispatchEvent events_[3];
        int next_ = 0;
      };
      return new Echo(request->exec().stdin());
    }
  } service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  JobRequest request =
      Command({"dispatch", "--address", test_support::LoopbackAddress(port),
               "--", "cat"});
  MutableExec(request).stdin_data = "all of it\n";
  CollectingJob client(request);
  EXPECT_EQ(RunExec(client), JobOutcome::Exited(0)) << client.err();
  EXPECT_EQ(client.out(), "all of it\n");
  EXPECT_THAT(client.err(), HasSubstr("predates streamed stdin"));
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportTest,
    ::testing::Values(Transport::kTcp, Transport::kTcpMtls, Transport::kUnix),
    [](const ::testing::TestParamInfo<Transport>& param_info) {
      return Name(param_info.param);
    });

// A socket file left behind by a process that is gone: bound, never
// unlinked.
void LeaveStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof address.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  close(fd);
  ASSERT_TRUE(std::filesystem::is_socket(path));
}

TEST(UnixSocketTest, IsOwnerOnlyAndAStaleFileIsReplaced) {
  test_support::TempDir dir;
  const std::string path = dir.path("w.sock");
  LeaveStaleSocket(path);
  Daemon daemon({"--idle-timeout-seconds", "0", "--uds", path});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "owner-only";
  EXPECT_EQ(st.st_uid, geteuid());
  auto connection = WorkerConnection::Open("unix:" + path);
  EXPECT_TRUE((*connection)->IdleTime(seconds(5)).ok());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(path).parent_path())) {
    names.push_back(entry.path().filename());
  }
  EXPECT_EQ(names, std::vector<std::string>{"w.sock"})
      << "bound in a private directory, moved into place, nothing left";
}

// A second worker on the socket of a live one is refused and leaves it be.
TEST(UnixSocketTest, ALiveWorkersSocketIsRefused) {
  test_support::TempDir dir;
  const std::string path = dir.path("w.sock");
  Daemon first({"--idle-timeout-seconds", "0", "--uds", path});
  ASSERT_GT(first.port(), 0) << first.log();
  CollectingJob second(Command({"serve", "--port", "0", "--uds", path}));
  EXPECT_EQ(RunExec(second), JobOutcome::Exited(1));
  EXPECT_THAT(second.err(), HasSubstr("another process (a worker still "
                                      "running?) accepts connections on it"));
  auto connection = WorkerConnection::Open("unix:" + path);
  EXPECT_TRUE((*connection)->IdleTime(seconds(5)).ok())
      << "the first still serves on it";
}

TEST(UnixSocketTest, APathThatIsNoSocketIsLeftAlone) {
  test_support::TempDir dir;
  const std::string path = dir.path("notes.txt");
  std::ofstream(path) << "keep me\n";
  CollectingJob serve(Command({"serve", "--port", "0", "--uds", path}));
  EXPECT_EQ(RunExec(serve), JobOutcome::Exited(1));
  EXPECT_THAT(serve.err(), HasSubstr("exists and is not a socket"));
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
}

// Under admission lists, the owner-only socket's callers are the worker's
// own user: they may control it, while an unlisted certificate over TCP
// may not.
TEST(UnixSocketTest, AdmissionTrustsTheOwnerOnlySocket) {
  test_support::TestPki pki;
  const test_support::Pem worker =
      pki.Leaf("worker", {"DNS:worker.cfdb.internal", "IP:127.0.0.1"});
  test_support::TempDir dir;
  const std::string path = dir.path("w.sock");
  Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert,
                 "--tls-key", worker.key, "--tls-admit-control",
                 "api.cfdb.internal", "--tls-admit-observe",
                 "worker.cfdb.internal", "--idle-timeout-seconds", "0", "--uds",
                 path});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto tcp = WorkerConnection::Open(daemon.address(), pki.Mtls(worker));
  EXPECT_TRUE(absl::IsPermissionDenied(
      (*tcp)->Dispatch(ExecRequest({"true"}), {}).status()));
  auto local = WorkerConnection::Open("unix:" + path, pki.Mtls(worker));
  EXPECT_TRUE(ExitedZero((*local)->Dispatch(ExecRequest({"true"}), {})));
}

// Wool's fleet tooling: `idle` and `stop` of wool.runtime.protobuf.wire.Worker
// by their exact names, on the same docket and drain.
TEST(WoolCompatTest, IdleAndStopUnderWoolsNames) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--wool-compat"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto channel =
      grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  auto wool = wool_wire::Worker::NewStub(channel);
  auto deadline = [] {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + seconds(30));
    return context;
  };
  wool_wire::IdleTime idle;
  ASSERT_TRUE(wool->idle(deadline().get(), wool_wire::Void(), &idle).ok());
  EXPECT_GT(idle.seconds(), 0.0);
  // Wool's dispatch, and any other method nothing here serves: one line.
  const grpc::Status dispatch = test_support::CallRaw(
      daemon.address(), "/wool.runtime.protobuf.wire.Worker/dispatch", "");
  EXPECT_EQ(dispatch.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(dispatch.error_message(),
            "cfdb-worker serves only Wool's idle and stop, not "
            "/wool.runtime.protobuf.wire.Worker/dispatch");
  const grpc::Status newer = test_support::CallRaw(
      daemon.address(), "/cfdb.worker.v1.Worker/FromTheFuture", "");
  EXPECT_EQ(newer.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(newer.error_message(),
              HasSubstr("does not serve /cfdb.worker.v1.Worker/FromTheFuture: "
                        "it serves cfdb.worker.v1.Worker"));

  auto connection = WorkerConnection::Open(daemon.address());
  std::thread job([&] {
    EXPECT_TRUE(ExitedZero(
        (*connection)->Dispatch(ExecRequest({"sleep", "3"}), {}, seconds(30))));
  });
  ASSERT_TRUE(test_support::WaitFor([&] {
    wool_wire::IdleTime busy;
    return wool->idle(deadline().get(), wool_wire::Void(), &busy).ok() &&
           busy.seconds() == 0;
  })) << "0 while busy, as Idle";
  wool_wire::StopRequest stop;
  stop.set_timeout(30);  // the drain grace
  wool_wire::Void done;
  const grpc::Status stopped = wool->stop(deadline().get(), stop, &done);
  job.join();
  EXPECT_TRUE(stopped.ok()) << stopped.error_message();
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("stop rpc: draining with grace 30 s"));
}

TEST(WoolCompatTest, OffByDefault) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  auto wool = wool_wire::Worker::NewStub(grpc::CreateChannel(
      daemon.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  wool_wire::IdleTime idle;
  const grpc::Status status = wool->idle(&context, wool_wire::Void(), &idle);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(), HasSubstr("only with --wool-compat"));
}

}  // namespace
}  // namespace cfdb::worker

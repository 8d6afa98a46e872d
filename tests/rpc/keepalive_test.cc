// HTTP/2 keepalive for long silent jobs: a client that keeps its connection
// alive with pings every 10 s (what clients behind NATs and load balancers
// do) runs a silent job to its end, and a client that vanishes without
// closing has its job cancelled once the server's own pings go unanswered.
#include <signal.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/wire.h"
#include "support/daemon.h"
#include "support/loopback.h"
#include "support/proc_util.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::ExecRequest;

TimePoint Now() { return std::chrono::steady_clock::now(); }

// The settings README.md and docs/DESIGN.md tell clients to use.
grpc::ChannelArguments PingingClient() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

class KeepaliveTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    worker_ = std::make_unique<Worker>(WorkerOptions{
        .max_concurrent_tasks = 2, .task_kill_grace = seconds(1)});
    ASSERT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    auto server = WorkerServer::Start(*worker_, std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::string address() const {
    return test_support::LoopbackAddress(server_->port());
  }

  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
};

// gRPC's default server policy sends GOAWAY "too_many_pings" to such a
// client after a few pings without data (at 30 s here), cancelling its job.
TEST_F(KeepaliveTest, ASilentJobOutlivesAClientPingingEveryTenSeconds) {
  Start({.address = "127.0.0.1:0"});
  auto stub = v1::Worker::NewStub(grpc::CreateCustomChannel(
      address(), grpc::InsecureChannelCredentials(), PingingClient()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(120));
  auto reader = stub->Dispatch(
      &context,
      wire::ToProto(ExecRequest({"sh", "-c", "sleep 35; echo done"})));
  std::string out;
  std::optional<JobOutcome> outcome;
  v1::DispatchEvent event;
  while (reader->Read(&event)) {
    if (event.has_output()) out += event.output().data();
    if (auto o = wire::OutcomeOf(event)) outcome = o;
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": "
                           << status.error_message();
  EXPECT_EQ(outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, "done\n");
}

// A client that stops answering (its process stopped: the kernel still
// holds the connection open, nothing answers the server's pings) is gone
// within the server's keepalive time + timeout: its job, whose detach
// grace is 0, is cancelled then.
TEST_F(KeepaliveTest, AClientThatVanishesHasItsJobCancelled) {
  Start({.address = "127.0.0.1:0",
         .keepalive_time = seconds(1),
         .keepalive_timeout = seconds(1)});
  test_support::CollectingJob client(test_support::Command(
      {"dispatch", "--address", address(), "--no-stdin",
       "--detach-grace-seconds", "0", "--", "sleep", "100"}));
  std::thread runner([&] { RunExec(client); });
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return worker_->docket().in_flight() == 1; }));
  // The client is the only child of this test whose job runs: stop it.
  pid_t pid = 0;
  ASSERT_TRUE(test_support::WaitFor([&] {
    for (pid_t child : test_support::Children(getpid())) {
      if (test_support::Comm(child) == "cfdb-worker") pid = child;
    }
    return pid != 0;
  }));
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const TimePoint stopped = Now();
  EXPECT_TRUE(test_support::WaitFor(
      [&] { return worker_->docket().in_flight() == 0; }, seconds(20)))
      << "the job is still in flight";
  const double took = ToSeconds(Now() - stopped);
  std::cout << "job cancelled " << took << " s after its client stopped\n";
  // Cancelled by keepalive, well before the wait above gives up.
  EXPECT_LT(took, 1 + 1 + 8.0) << "keepalive time + timeout + margin";
  kill(pid, SIGKILL);
  runner.join();
}

}  // namespace
}  // namespace cfdb::worker

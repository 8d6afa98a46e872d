// `cfdb-worker reap` against real workers in every state (issue 14).
#include "cli/reap.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/background_dispatch.h"
#include "support/daemon.h"
#include "support/fake_api.h"
#include "support/loopback.h"
#include "support/temp_dir.h"
#include "support/test_job.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Command;
using test_support::Daemon;
using test_support::ExecRequest;
using ::testing::HasSubstr;

// WaitIdleFor waits until the worker at `address` has been idle `seconds`.
void WaitIdleFor(const std::string& address, double seconds_idle,
                 const Credentials& credentials = Credentials::Insecure()) {
  auto connection = WorkerConnection::Open(address, credentials);
  ASSERT_TRUE(test_support::WaitFor([&] {
    return (*connection)->IdleTime(seconds(5)).value_or(0) >= seconds_idle;
  }));
}

// ReapLines runs `reap ARGS --format json` and returns its exit code and
// its lines by address.
std::pair<JobOutcome, std::map<std::string, nlohmann::json>> ReapJson(
    std::vector<std::string> args) {
  args.insert(args.begin(), {"reap", "--format", "json", "--timeout", "2"});
  CollectingJob reap(Command(args));
  const JobOutcome outcome = RunExec(reap);
  std::map<std::string, nlohmann::json> lines;
  const std::vector<std::string> out =
      absl::StrSplit(reap.out(), '\n', absl::SkipEmpty());
  for (const std::string& line : out) {
    nlohmann::json object = nlohmann::json::parse(line);
    lines[object["address"]] = object;
  }
  EXPECT_FALSE(reap.out().empty()) << reap.err();
  return {outcome, lines};
}

// A gRPC server without the worker's service: Idle is UNIMPLEMENTED there,
// as on a worker that predates it.
class LegacyServer {
 public:
  LegacyServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&other_);  // gRPC starts no server without one
    server_ = builder.BuildAndStart();
  }
  ~LegacyServer() { server_->Shutdown(); }
  std::string address() const { return test_support::LoopbackAddress(port_); }

 private:
  grpc::health::v1::Health::CallbackService other_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// One reap over workers in every state: each line says what was done and
// why, only the idle one is stopped, and the exit code says one could not
// be polled.
TEST(ReapTest, EachWorkerGetsTheActionItsStateCalls) {
  Daemon idle({"--idle-timeout-seconds", "0"});
  Daemon busy({"--idle-timeout-seconds", "0"});
  Daemon below({"--idle-timeout-seconds", "0"});
  LegacyServer legacy;
  const std::string unreachable = "127.0.0.1:1";
  // The threshold is wide, so that the below-threshold worker stays below
  // it however long the reap process takes to start (1.6 s under ASan);
  // the busy job starts after the wait and outlasts the reap.
  WaitIdleFor(idle.address(), 4.1);
  test_support::BackgroundDispatch job(busy.address(),
                                       ExecRequest({"sleep", "8"}));
  auto below_connection = WorkerConnection::Open(below.address());
  ASSERT_TRUE((*below_connection)->Dispatch(ExecRequest({"true"}), {}).ok());
  // Its end reaches us a moment before the job leaves the docket.
  ASSERT_TRUE(test_support::WaitFor([&] {
    return (*below_connection)->IdleTime(seconds(1)).value_or(0) > 0;
  }));

  auto [outcome, lines] = ReapJson(
      {"--idle-threshold-seconds", "4", "--grace-seconds", "5", idle.address(),
       busy.address(), below.address(), legacy.address(), unreachable});
  (void)job.Outcome();
  EXPECT_EQ(outcome, JobOutcome::Exited(1)) << "one could not be polled";
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[idle.address()]["action"], "stopped");
  EXPECT_GE(lines[idle.address()]["idle_seconds"].get<double>(), 4);
  EXPECT_EQ(lines[idle.address()]["drained"], 0);
  EXPECT_EQ(lines[busy.address()]["action"], "kept busy");
  EXPECT_EQ(lines[below.address()]["action"], "kept below threshold");
  EXPECT_EQ(lines[legacy.address()]["action"], "skipped");
  EXPECT_EQ(lines[legacy.address()]["error_kind"], "idle unavailable");
  EXPECT_EQ(lines[unreachable]["action"], "poll failed");
  EXPECT_EQ(lines[unreachable]["error_kind"], "transient error");
  EXPECT_EQ(idle.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(idle.log(), HasSubstr("stop rpc: draining with grace 5 s"));
  EXPECT_THAT(busy.log(), ::testing::Not(HasSubstr("stop rpc")));
  EXPECT_THAT(below.log(), ::testing::Not(HasSubstr("stop rpc")));
}

// A dry run stops nothing; text lines, one per worker (in the order they
// answer); addresses may come from stdin.
TEST(ReapTest, ADryRunStopsNothing) {
  Daemon a({"--idle-timeout-seconds", "0"});
  Daemon b({"--idle-timeout-seconds", "0"});
  WaitIdleFor(a.address(), 0.15);
  WaitIdleFor(b.address(), 0.15);
  JobRequest request = Command({"reap", "--idle-threshold-seconds", "0.1",
                                "--dry-run", "--addresses-from", "-"});
  MutableExec(request).stdin_data =
      absl::StrCat("# the fleet\n", a.address(), "\n\n", b.address(), "\n");
  CollectingJob reap(request);
  EXPECT_EQ(RunExec(reap), JobOutcome::Exited(0)) << reap.err();
  const std::vector<std::string> lines =
      absl::StrSplit(reap.out(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << reap.out();
  EXPECT_THAT(lines,
              ::testing::UnorderedElementsAre(
                  ::testing::StartsWith(a.address() + " dry-run idle="),
                  ::testing::StartsWith(b.address() + " dry-run idle=")));
  for (Daemon* d : {&a, &b}) {
    auto c = WorkerConnection::Open(d->address());
    EXPECT_TRUE((*c)->IdleTime(seconds(2)).ok()) << "still serving";
  }
}

// Under admission lists, a reaper that may only observe is told so for
// its stop, and one not admitted at all for its poll.
TEST(ReapTest, PermissionDeniedIsSaidByKind) {
  test_support::TestPki pki;
  const test_support::Pem worker =
      pki.Leaf("worker", {"DNS:worker.cfdb.internal", "IP:127.0.0.1"});
  const test_support::Pem observer =
      pki.Leaf("reaper", {"DNS:reaper.cfdb.internal"});
  const test_support::Pem stranger = pki.Leaf("stranger", {"DNS:stranger"});
  Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert,
                 "--tls-key", worker.key, "--idle-timeout-seconds", "0",
                 "--tls-admit-control", "api.cfdb.internal",
                 "--tls-admit-observe",
                 "reaper.cfdb.internal,worker.cfdb.internal"});
  WaitIdleFor(daemon.address(), 0.15, pki.Mtls(observer));
  for (const auto& [pem, action] :
       {std::pair{&observer, "stop failed"}, {&stranger, "poll failed"}}) {
    auto [outcome, lines] = ReapJson(
        {"--idle-threshold-seconds", "0.1", "--tls-ca", pki.ca().cert,
         "--tls-cert", pem->cert, "--tls-key", pem->key, daemon.address()});
    EXPECT_EQ(outcome, JobOutcome::Exited(1));
    EXPECT_EQ(lines[daemon.address()]["action"], action);
    EXPECT_EQ(lines[daemon.address()]["error_kind"], "permission denied");
  }
}

// The pool under `reap`: every address once, never more in hand than the
// concurrency, and each result handed on as soon as it is known: the first
// worker's step returns only once all 29 others were handed on, which
// results held to the end would never allow.
TEST(ReapPoolTest, AtMostTheConcurrencyAtOnceAndEachResultAsItComes) {
  cli::ReapOptions options;
  options.concurrency = 3;
  for (int i = 0; i < 30; ++i) {
    options.addresses.push_back(absl::StrCat("w", i));
  }
  absl::Mutex mu;
  int running = 0;
  int most = 0;
  std::vector<std::string> handed;
  bool slow_saw_the_rest = false;
  bool slow_started = false;
  const auto step = [&](const std::string& address) {
    absl::MutexLock lock(&mu);
    // The others wait for the slow one to be running, so that they run
    // beside it whatever order the threads are scheduled in (each step is
    // otherwise over within one hold of the lock).
    if (address != "w0") {
      mu.AwaitWithTimeout(absl::Condition(&slow_started), absl::Seconds(60));
    }
    most = std::max(most, ++running);
    if (address == "w0") {
      slow_started = true;
      slow_saw_the_rest = mu.AwaitWithTimeout(
          absl::Condition(
              +[](std::vector<std::string>* h) { return h->size() == 29; },
              &handed),
          absl::Seconds(60));
    }
    --running;
    return cli::ReapResult{.address = address};
  };
  cli::Reap(options, step, [&](const cli::ReapResult& result) {
    absl::MutexLock lock(&mu);
    handed.push_back(result.address);
  });
  EXPECT_TRUE(slow_saw_the_rest);
  EXPECT_LE(most, 3);
  EXPECT_GE(most, 2) << "the others ran beside the slow one";
  ASSERT_EQ(handed.size(), 30u);
  EXPECT_EQ(handed.back(), "w0");
  std::sort(handed.begin(), handed.end());
  std::vector<std::string> all = options.addresses;
  std::sort(all.begin(), all.end());
  EXPECT_EQ(handed, all);
}

TEST(ReapTest, NoAddressIsAUsageError) {
  CollectingJob reap(Command({"reap", "--idle-threshold-seconds", "1"}));
  EXPECT_EQ(RunExec(reap), JobOutcome::Exited(2));
  EXPECT_THAT(reap.err(), HasSubstr("no addresses"));
}

TEST(ReapTest, AnAddressWithoutAPortIsAUsageError) {
  CollectingJob reap(Command({"reap", "--idle-threshold-seconds", "1",
                              "127.0.0.1:50051", "worker-3.internal"}));
  EXPECT_EQ(RunExec(reap), JobOutcome::Exited(2));
  EXPECT_THAT(reap.err(), HasSubstr("'worker-3.internal' has no port"));
}

// FakeDns is tests/cli/fake_dns.py answering for one name on port 53 of a
// loopback address of its own; Resolving(request) runs a command of the
// binary with that server as its only nameserver: a resolv.conf mounted
// over /etc's in a mount namespace of the command's own (as root, which CI
// is), so that the name goes the C library's real way, nsswitch and
// resolver, to a server of the test's.
class FakeDns {
 public:
  explicit FakeDns(std::vector<std::string> args)
      : listen_(absl::StrCat("127.53.", getpid() % 250 + 1, ".1")),
        server_(CFDB_FAKE_DNS, [&] {
          args.insert(args.begin(), {"--listen", listen_});
          return args;
        }()) {
    std::ofstream(dir_.path("resolv.conf"))
        << "nameserver " << listen_ << "\noptions timeout:2 attempts:2\n";
  }
  JobRequest Resolving(JobRequest request) const {
    std::vector<std::string>& argv = MutableExec(request).argv;
    argv.insert(argv.begin(),
                {"unshare", "--mount", "sh", "-c",
                 "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"",
                 dir_.path("resolv.conf")});
    return request;
  }
  test_support::FakeApi& server() { return server_; }

 private:
  test_support::TempDir dir_;
  std::string listen_;
  test_support::FakeApi server_;
};

// --addresses-from dns:NAME:PORT: every A and AAAA record of the name is a
// worker at PORT, as a headless Service's are; asked of the DNS server.
TEST(ReapDnsTest, EveryAddressRecordOfTheNameIsAWorker) {
  Daemon first({"--idle-timeout-seconds", "0"});
  const std::string port = std::to_string(first.port());
  Daemon second(
      {"--host", "127.0.0.2", "--port", port, "--idle-timeout-seconds", "0"});
  Daemon third(
      {"--host", "::1", "--port", port, "--idle-timeout-seconds", "0"});
  ASSERT_EQ(second.address(), "127.0.0.2:" + port);
  ASSERT_EQ(third.address(), "[::1]:" + port);
  FakeDns dns({"--name", "workers.cfdb.test", "--a", "127.0.0.1", "--a",
               "127.0.0.2", "--aaaa", "::1"});
  for (Daemon* d : {&first, &second, &third}) WaitIdleFor(d->address(), 0.15);
  CollectingJob reap(dns.Resolving(Command(
      {"reap", "--idle-threshold-seconds", "0.1", "--dry-run", "--format",
       "json", "--addresses-from", "dns:workers.cfdb.test:" + port})));
  EXPECT_EQ(RunExec(reap), JobOutcome::Exited(0)) << reap.err();
  std::vector<std::string> polled;
  for (absl::string_view line :
       absl::StrSplit(reap.out(), '\n', absl::SkipEmpty())) {
    const nlohmann::json object = nlohmann::json::parse(line);
    EXPECT_EQ(object["action"], "dry-run") << line;
    polled.push_back(object["address"]);
  }
  EXPECT_THAT(polled, ::testing::UnorderedElementsAre(
                          first.address(), second.address(), third.address()));
  std::vector<std::string> asked;
  for (const nlohmann::json& query : dns.server().Requests()) {
    asked.push_back(query["type"]);
  }
  EXPECT_THAT(asked, ::testing::IsSupersetOf({"A", "AAAA"}))
      << "the records came from the test's server";
}

// A fleet scaled to zero (a headless Service without endpoints answers
// NXDOMAIN) is no workers: nothing to do, which is said; a server failure
// is a transient error (75); a source without a port, a usage error (2).
TEST(ReapDnsTest, NoRecordsIsNoWorkersAndAServerFailureIsTransient) {
  FakeDns dns({"--name", "workers.cfdb.test", "--servfail", "down.cfdb.test"});
  struct Case {
    std::vector<std::string> args;
    JobOutcome outcome;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{"reap", "--idle-threshold-seconds", "0", "--addresses-from",
             "dns:gone.cfdb.test:50051"},
            JobOutcome::Exited(0),
            "cfdb-worker reap: --addresses-from: 'dns:gone.cfdb.test:50051' "
            "has no address records: no workers"},
           {{"status", "--addresses-from", "dns:workers.cfdb.test:50051"},
            JobOutcome::Exited(0),
            "has no address records: no workers"},
           {{"reap", "--idle-threshold-seconds", "0", "--addresses-from",
             "dns:down.cfdb.test:50051"},
            JobOutcome::Exited(75),
            "'dns:down.cfdb.test:50051': Temporary failure in name "
            "resolution"},
           {{"status", "--addresses-from", "dns:workers.cfdb.test"},
            JobOutcome::Exited(2),
            "cfdb-worker status: --addresses-from: 'dns:workers.cfdb.test' "
            "has no port"},
       }) {
    CollectingJob job(dns.Resolving(Command(c.args)));
    EXPECT_EQ(RunExec(job), c.outcome) << c.args.back() << job.err();
    EXPECT_THAT(job.err(), HasSubstr(c.err));
    EXPECT_THAT(job.out(), ::testing::Not(HasSubstr("poll")));
  }
}

}  // namespace
}  // namespace cfdb::worker

// Jobs as handles from the outside (issue 22): `dispatch` comes back to its
// job after its connection is cut, and no stop decided on a stale reading
// ever drains or cancels a job accepted after it: neither reap's nor the
// worker's own idle retirement.
#include <signal.h>

#include <atomic>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"
#include "cli/reap.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/loopback.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Command;
using test_support::Daemon;
using test_support::ExecRequest;

// Proxy is tests/cli/tcp_proxy.py forwarding a port to `target`; Cut
// (SIGUSR1) cuts every connection it carries, as its end does. With
// `hold_replies`, until the first cut, it holds back what the worker sends
// after the HTTP/2 handshake (--hold-replies).
class Proxy {
 public:
  Proxy(int listen_port, int target, bool hold_replies = false)
      : job_(ExecRequest(Argv(listen_port, target, hold_replies))) {
    thread_ = std::thread([this] { RunExec(job_); });
    EXPECT_TRUE(job_.WaitForOutput("listening on"));
    std::smatch m;
    const std::string out = job_.out();
    if (std::regex_search(out, m,
                          std::regex(R"(127\.0\.0\.1:(\d+) \(pid (\d+)\))"))) {
      port_ = std::stoi(m[1]);
      pid_ = std::stoi(m[2]);
    }
  }
  ~Proxy() {
    job_.Cancel();
    thread_.join();
  }
  int port() const { return port_; }
  // Cut cuts every connection it carries; it goes on listening.
  void Cut() const {
    if (pid_ > 0) kill(pid_, SIGUSR1);
  }

 private:
  static std::vector<std::string> Argv(int listen_port, int target,
                                       bool hold_replies) {
    std::vector<std::string> argv = {"python3", CFDB_TCP_PROXY,
                                     std::to_string(listen_port),
                                     std::to_string(target)};
    if (hold_replies) argv.emplace_back("--hold-replies");
    return argv;
  }

  CollectingJob job_;
  std::thread thread_;
  int port_ = 0;
  pid_t pid_ = 0;
};

std::string Numbers(int from, int to) {
  std::string text;
  for (int i = from; i <= to; ++i) absl::StrAppend(&text, i, "\n");
  return text;
}

// The connection of a `dispatch` is cut in the middle of its job: the
// command attaches again from the offsets it got to and exits with the
// job's own code and every byte of its output, once. The attach that took
// lasts as long as the job (here 11 s more than the window for trying,
// 10 s at a detach grace of 5 s), and a second cut, 13 s after the first,
// gets a window of its own.
TEST(HandleTest, DispatchComesBackToItsJobAfterItsConnectionIsCut) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  const Proxy proxy(0, daemon.port());
  const int port = proxy.port();
  ASSERT_GT(port, 0);
  CollectingJob dispatch(Command(
      {"dispatch", "--address", test_support::LoopbackAddress(port), "--job-id",
       "cut", "--detach-grace-seconds", "5", "--no-stdin", "--", "sh", "-c",
       "seq 1 30000; sleep 2; seq 30001 60000; sleep 11; seq 60001 90000; "
       "sleep 2; seq 90001 120000; exit 5"}));
  JobOutcome ended;
  std::thread client([&] { ended = RunExec(dispatch); });
  for (const char* seen : {"\n30000\n", "\n90000\n"}) {
    EXPECT_TRUE(dispatch.WaitForOutput(seen)) << dispatch.err();
    proxy.Cut();  // every connection through it is cut
  }
  client.join();
  EXPECT_EQ(ended, JobOutcome::Exited(5)) << dispatch.err();
  EXPECT_TRUE(dispatch.out() == Numbers(1, 120000))
      << dispatch.out().size() << " bytes; " << dispatch.err();
  EXPECT_THAT(dispatch.err(), ::testing::HasSubstr("attaching again"));
}

// Run runs `dispatch` (with `flags`) of a job that writes 1..1000 and
// exits 4, through a proxy that holds back the worker's replies: the
// worker accepts the job, but its Accepted never reaches the command,
// whose connection is cut once the worker runs it.
class HeldRepliesTest : public ::testing::Test {
 protected:
  JobOutcome Run(const std::vector<std::string>& flags) {
    Daemon daemon({"--idle-timeout-seconds", "0"});
    EXPECT_GT(daemon.port(), 0) << daemon.log();
    const Proxy proxy(0, daemon.port(), /*hold_replies=*/true);
    std::vector<std::string> argv = {
        "dispatch", "--address",  test_support::LoopbackAddress(proxy.port()),
        "--job-id", "unanswered", "--detach-grace-seconds",
        "30",       "--no-stdin"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const char* arg : {"--", "sh", "-c", "seq 1 1000; sleep 1; exit 4"}) {
      argv.emplace_back(arg);
    }
    dispatch_.emplace(Command(argv));
    JobOutcome ended;
    std::thread client([&] { ended = RunExec(*dispatch_); });
    auto direct = WorkerConnection::Open(daemon.address());
    EXPECT_TRUE(direct.ok());
    EXPECT_TRUE(test_support::WaitFor([&] {
      const auto jobs = (*direct)->ListJobs(seconds(5));
      return jobs.ok() && !jobs->empty();
    }));
    proxy.Cut();
    client.join();
    return ended;
  }

  std::optional<CollectingJob> dispatch_;
};

// The command, from which the call failed as transient, attaches to see
// whether the job started, and exits with the job's own code and output.
// (Reporting the transient error would say that nothing runs, and invite
// a second run.)
TEST_F(HeldRepliesTest, DispatchFindsItsJobWhenItsAcceptedWasLost) {
  EXPECT_EQ(Run({}), JobOutcome::Exited(4)) << dispatch_->err();
  EXPECT_TRUE(dispatch_->out() == Numbers(1, 1000))
      << dispatch_->out().size() << " bytes; " << dispatch_->err();
  EXPECT_THAT(dispatch_->err(),
              ::testing::HasSubstr("attaching to see whether it started"));
}

// With --attempts, the retry resends the job's id with attach_if_exists:
// it gets the job its first attempt started, not ALREADY_EXISTS (67).
TEST_F(HeldRepliesTest,
       ARetriedDispatchAttachesToTheJobItsFirstAttemptStarted) {
  EXPECT_EQ(Run({"--attempts", "2"}), JobOutcome::Exited(4))
      << dispatch_->err();
  EXPECT_TRUE(dispatch_->out() == Numbers(1, 1000))
      << dispatch_->out().size() << " bytes; " << dispatch_->err();
  EXPECT_THAT(dispatch_->err(), ::testing::HasSubstr("attempt 1 of 2 failed"));
}

// A worker that stops answering (SIGSTOPped once it accepted the job: as
// a host that vanished, or a connection whose replies stop on the way)
// ends the client's call by the client's own keepalive (limits.h: a ping
// unanswered for 10 s after 30 s without traffic); the worker, stopped,
// cannot end it. Before, the call waited until its deadline, and without
// one for ever.
TEST(KeepaliveLossTest, ACallToAWorkerThatStopsAnsweringEndsByKeepalive) {
  Daemon daemon({"--idle-timeout-seconds", "0"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());
  DispatchCallbacks callbacks;
  callbacks.on_accepted = [&] { kill(daemon.pid(), SIGSTOP); };
  const absl::StatusOr<JobOutcome> outcome =
      (*connection)
          ->Dispatch(ExecRequest({"sleep", "120"}), callbacks, seconds(120));
  kill(daemon.pid(), SIGCONT);
  ASSERT_FALSE(outcome.ok());
  EXPECT_TRUE(absl::IsUnavailable(outcome.status())) << outcome.status();
  EXPECT_THAT(std::string(outcome.status().message()),
              ::testing::HasSubstr("keepalive"));
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, outcome.status()),
            ErrorKind::kOutcomeUnknown)
      << outcome.status();
}

// A worker and a client in this process, restarted once stopped.
class ServedWorker {
 public:
  ServedWorker() {
    EXPECT_TRUE(worker_.RegisterKind(kExecKind, ExecKind()).ok());
    auto server = WorkerServer::Start(worker_, {.address = "127.0.0.1:0"});
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::string address() const {
    return test_support::LoopbackAddress(server_->port());
  }
  Worker& worker() { return worker_; }

 private:
  Worker worker_{WorkerOptions{.max_concurrent_tasks = 2}};
  std::unique_ptr<WorkerServer> server_;
};

// 200 rounds of a dispatch fired while reap runs against the same worker,
// its threshold at the idle edge, the stop with grace 0 (a job it drained
// would be cancelled): a job the worker accepts always runs to its end, and
// a worker reap stops has taken no job after its poll.
TEST(ReapRaceTest, ReapNeverDrainsOrCancelsAJobAcceptedAfterItsPoll) {
  constexpr double kThreshold = 0.002;
  int stopped = 0, kept = 0, raced = 0;
  auto served = std::make_unique<ServedWorker>();
  for (int round = 0; round < 200; ++round) {
    // At the edge: idle just past the threshold.
    ASSERT_TRUE(test_support::WaitFor(
        [&] { return ToSeconds(served->worker().Idle()) >= kThreshold; }));
    cli::ReapOptions options;
    options.client.timeout = seconds(5);
    options.client.attempts = 1;
    options.idle_threshold_seconds = kThreshold;
    options.grace_seconds = 0;
    cli::ReapResult reaped;
    std::thread reap(
        [&] { reaped = cli::ReapOne(options, served->address()); });
    auto connection = WorkerConnection::Open(served->address());
    ASSERT_TRUE(connection.ok());
    JobRequest request = ExecRequest({"true"});
    std::this_thread::sleep_for(std::chrono::microseconds(50 * (round % 20)));
    const absl::StatusOr<JobOutcome> outcome =
        (*connection)->Dispatch(request, {}, seconds(30));
    reap.join();
    if (outcome.ok()) {
      EXPECT_EQ(*outcome, JobOutcome::Exited(0))
          << "round " << round << ": an accepted job was cut short by reap";
    } else {
      EXPECT_TRUE(IsTransient(ClassifyError(Rpc::kDispatch, outcome.status())))
          << "round " << round << ": " << outcome.status();
    }
    if (reaped.action == cli::ReapAction::kStopped) {
      EXPECT_EQ(reaped.stopped->drained + reaped.stopped->cancelled, 0u)
          << "round " << round << ": reap stopped a worker with a job";
      ++stopped;
      served = std::make_unique<ServedWorker>();
    } else {
      ++kept;
      raced += reaped.action == cli::ReapAction::kKeptBecameBusy;
    }
  }
  std::cout << "reap race: stopped " << stopped << ", kept " << kept
            << " (of which the stop lost the race: " << raced << ")\n";
}

// The same race against the worker's own idle retirement at its timeout:
// every job the worker accepts runs to its end.
TEST(SelfReaperRaceTest, IdleRetirementNeverCutsShortAJobAcceptedAfterItsPoll) {
  int retired = 0, accepted = 0;
  for (int round = 0; round < 10; ++round) {
    Daemon daemon({"--idle-timeout-seconds", "0.2",
                   "--idle-poll-interval-seconds", "0.05",
                   "--max-lifetime-grace-seconds", "0"});
    ASSERT_GT(daemon.port(), 0) << daemon.log();
    auto connection = WorkerConnection::Open(daemon.address());
    ASSERT_TRUE(connection.ok());
    // Jobs aimed at the timeout, until the worker retires (the last after
    // a wait well past it).
    for (int shot = 0;; ++shot) {
      std::this_thread::sleep_for(
          milliseconds(shot < 15 ? 150 + (shot * 7 + round) % 60 : 1000));
      const absl::StatusOr<JobOutcome> outcome =
          (*connection)->Dispatch(ExecRequest({"true"}), {}, seconds(30));
      if (!outcome.ok()) {
        EXPECT_TRUE(
            IsTransient(ClassifyError(Rpc::kDispatch, outcome.status())))
            << outcome.status();
        break;
      }
      ++accepted;
      EXPECT_EQ(*outcome, JobOutcome::Exited(0))
          << "round " << round << ": an accepted job was cut short";
    }
    EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
    EXPECT_THAT(daemon.log(), ::testing::HasSubstr("0 finished, 0 cancelled"));
    ++retired;
  }
  std::cout << "self-reaper race: " << retired << " retirements, " << accepted
            << " jobs accepted at the edge\n";
}

}  // namespace
}  // namespace cfdb::worker

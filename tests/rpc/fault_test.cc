// Fault injection: oversized requests, concurrent and stuck drains, a tiny
// descriptor limit and a client that stops reading. Each test checks that the
// worker answers with a status or an outcome, and never crashes or grows
// without bound.
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "cfdb/worker/worker.h"
#include "gmock/gmock.h"
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

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Daemon;
using test_support::ExecRequest;
using test_support::JobChildren;
using ::testing::HasSubstr;
using Failure = JobOutcome::Failure;

constexpr auto kTimeout = seconds(30);

TimePoint Now() { return std::chrono::steady_clock::now(); }

using test_support::WaitFor;

// BlockedInWrite returns true while `pid` sleeps inside write(2) (syscall 1
// on x86-64, 64 on arm64), i.e. its output pipe is full.
bool BlockedInWrite(pid_t pid) {
  std::istringstream in(
      test_support::ProcFile(absl::StrCat("/proc/", pid, "/syscall")));
  long number = -1;
  if (!(in >> number)) return false;
#if defined(__x86_64__)
  return number == 1;
#elif defined(__aarch64__)
  return number == 64;
#else
  return number >= 0;
#endif
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    connection_.reset();
    server_.reset();  // before the worker it serves
    worker_ = std::make_unique<Worker>(WorkerOptions{
        .max_concurrent_tasks = 4, .task_kill_grace = seconds(1)});
    ASSERT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    auto server = WorkerServer::Start(*worker_, {.address = "127.0.0.1:0"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto connection =
        WorkerConnection::Open(test_support::LoopbackAddress(server_->port()));
    ASSERT_TRUE(connection.ok());
    connection_ = *std::move(connection);
  }

  // Dispatch runs `request` on the worker directly (no gRPC) and returns
  // the job once accepted.
  std::shared_ptr<CollectingJob> Dispatch(JobRequest request) {
    auto job = std::make_shared<CollectingJob>(std::move(request), seconds(1));
    EXPECT_TRUE(worker_->Dispatch(job).ok());
    return job;
  }

  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<WorkerConnection> connection_;
};

TEST_F(FaultTest, RequestOverTheMessageLimitFailsOncePermanently) {
  // A raw channel without a send limit, so the worker itself sees the
  // oversized request.
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel(test_support::LoopbackAddress(server_->port()),
                                grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Worker::NewStub(channel);
  JobRequest request = ExecRequest({"cat"});
  MutableExec(request).stdin_data.assign(kMaxMessageBytes + 1024, 'x');
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kTimeout);
  auto reader = stub->Dispatch(&ctx, wire::ToProto(request));
  v1::DispatchEvent event;
  EXPECT_FALSE(reader->Read(&event)) << "no event for a refused request";
  const absl::Status refused = wire::FromGrpc(reader->Finish());
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, refused), ErrorKind::kRpcError)
      << "deterministic: no retry may help " << refused;

  // The library's own client refuses to send it at all, saying the size and
  // the limit, and no retry happens.
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(request, {});
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(outcome.status().message()),
              HasSubstr(absl::StrCat("more than the limit of ",
                                     kMaxMessageBytes, " bytes")));
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, outcome.status()),
            ErrorKind::kRpcError);

  EXPECT_TRUE(connection_->IdleTime(kTimeout).ok())
      << "the worker still answers";
  EXPECT_EQ(worker_->docket().in_flight(), 0u);
}

TEST_F(FaultTest, HugeEnvironmentIsInvalidArgumentNamingIt) {
  JobRequest request = ExecRequest({"true"});
  for (int i = 0; i < 20; ++i) {
    MutableExec(request).env[absl::StrCat("BIG", i)] =
        std::string(64 * 1024, 'v');
  }
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(request, {});
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("exec.env"));
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("limit"));
}

// Two concurrent Stops with different graces share one drain: the earliest
// deadline wins for both, whichever call came first.
TEST_F(FaultTest, ConcurrentStopsEarliestDeadlineWinsForBoth) {
  for (const bool long_grace_first : {true, false}) {
    SetUp();
    std::shared_ptr<CollectingJob> job =
        Dispatch(ExecRequest({"sleep", "300"}));
    const Duration first_grace =
        long_grace_first ? seconds(300) : milliseconds(200);
    const Duration second_grace =
        long_grace_first ? milliseconds(200) : seconds(300);
    const TimePoint start = Now();
    StopSummary first;
    absl::Notification first_done;
    std::thread stopper([&] {
      first = worker_->Stop(first_grace);
      first_done.Notify();
    });
    ASSERT_TRUE(WaitFor([&] { return worker_->stopping(); }));
    const StopSummary second = worker_->Stop(second_grace);
    ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(30)))
        << "the 300 s Stop returned with the 0.2 s one";
    stopper.join();
    EXPECT_LT(Now() - start, seconds(60))
        << "long grace first: " << long_grace_first;
    EXPECT_EQ(first.cancelled, 1u);
    EXPECT_EQ(second.cancelled, 1u);
    EXPECT_EQ(first.drained, 0u);
    ASSERT_TRUE(job->outcome().has_value());
    EXPECT_EQ(job->outcome()->failure, Failure::kCancelled);
  }
}

// A Stop that arrives while another Stop drains waits for that drain and
// returns once it ends, with the same summary.
TEST_F(FaultTest, StopDuringADrainReturnsWhenTheDrainEnds) {
  absl::Notification release;
  ASSERT_TRUE(worker_
                  ->RegisterKind("gate", {.run =
                                              [&release](JobContext&) {
                                                release.WaitForNotification();
                                                return JobOutcome::Exited(0);
                                              }})
                  .ok());
  JobRequest gate;
  gate.job_id = "gate";
  gate.kind = "gate";
  std::shared_ptr<CollectingJob> job = Dispatch(gate);

  StopSummary first, second;
  absl::Notification first_done, second_done;
  std::thread a([&] {
    first = worker_->Stop(Duration(-1));
    first_done.Notify();
  });
  ASSERT_TRUE(WaitFor([&] { return worker_->stopping(); }));
  std::thread b([&] {
    second = worker_->Stop(seconds(300));
    second_done.Notify();
  });
  // Neither may return while the job runs.
  EXPECT_FALSE(first_done.HasBeenNotified());
  EXPECT_FALSE(second_done.HasBeenNotified());
  EXPECT_EQ(worker_->docket().in_flight(), 1u);
  release.Notify();
  EXPECT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  a.join();
  b.join();
  EXPECT_EQ(first.drained, 1u);
  EXPECT_EQ(second.drained, 1u);
  EXPECT_EQ(second.cancelled, 0u);
  EXPECT_EQ(job->outcome(), JobOutcome::Exited(0));
}

TEST_F(FaultTest, DrainIsBoundedWhenAJobIgnoresSigterm) {
  std::shared_ptr<CollectingJob> job = Dispatch(
      ExecRequest({"sh", "-c", "trap '' TERM; echo ready; sleep 300"}));
  ASSERT_TRUE(job->WaitForOutput("ready")) << "the trap is in place";
  const Duration grace = seconds(1), kill_grace = seconds(1);
  const TimePoint start = Now();
  const StopSummary summary = worker_->Stop(grace);
  const Duration took = Now() - start;
  EXPECT_GE(took, grace);
  // Margin for a loaded 2-core machine (and sanitizers).
  EXPECT_LT(took, grace + kill_grace + seconds(10));
  EXPECT_EQ(summary.cancelled, 1u);
  ASSERT_TRUE(job->outcome().has_value());
  EXPECT_EQ(job->outcome()->failure, Failure::kCancelled);
  EXPECT_THAT(job->outcome()->message, HasSubstr("SIGKILL"));
}

// Regression: a job constructed while descriptors had run out has no cancel
// eventfd; once descriptors were free again its program started, and then
// neither a cancel nor a Stop(0) reached it (poll ignores fd -1). Dispatch
// now refuses such a job with RESOURCE_EXHAUSTED.
TEST(FaultFdTest, JobWithoutCancelDescriptorIsRefusedNotRunUncancellable) {
  Worker worker(WorkerOptions{.task_kill_grace = seconds(1)});
  ASSERT_TRUE(worker.RegisterKind(kExecKind, ExecKind()).ok());
  // Nothing but the Job's construction happens without descriptors: UBSan
  // checks a vptr it has not seen before through a pipe, so it sees this
  // type first, and no shared_ptr is touched in there.
  delete new CollectingJob(ExecRequest({"true"}));
  CollectingJob* raw = nullptr;
  {
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    rlimit tight = old;
    tight.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
    std::vector<int> hogs;
    hogs.reserve(256);
    for (int fd; (fd = dup(STDERR_FILENO)) >= 0;) hogs.push_back(fd);
    raw = new CollectingJob(ExecRequest({"sh", "-c", "echo up; exec sleep 60"}),
                            seconds(1));
    for (int fd : hogs) close(fd);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  }
  std::shared_ptr<CollectingJob> job(raw);
  ASSERT_LT(job->cancel_fd(), 0) << "descriptors were exhausted";
  const absl::Status dispatched = worker.Dispatch(job);
  EXPECT_EQ(dispatched.code(), absl::StatusCode::kResourceExhausted)
      << dispatched;
  if (dispatched.ok()) {
    ASSERT_TRUE(job->WaitForOutput("up")) << "it waits in poll(2) now";
    const TimePoint start = Now();
    worker.Stop(Duration::zero());
    EXPECT_LT(Now() - start, seconds(30)) << "Stop(0) waited for the program";
    ASSERT_TRUE(job->outcome().has_value());
    EXPECT_EQ(job->outcome()->failure, Failure::kCancelled)
        << "Stop(0) could not cancel it: " << job->outcome()->ToString();
  }
}

// Regression: ~Worker took the job threads' list apart while a job thread
// that had just left the docket was about to move itself from that list to
// the finished list, splicing an iterator of a list it no longer belonged
// to (a crash in std::thread::join, or heap corruption). Destroy workers
// right after their last job, many times, to hit that window.
TEST(FaultWorkerTest, DestroyingAWorkerRightAfterItsLastJobIsSafe) {
  for (int i = 0; i < 300; ++i) {
    Worker worker(WorkerOptions{.max_concurrent_tasks = 4});
    ASSERT_TRUE(
        worker
            .RegisterKind(
                "noop",
                {.run = [](JobContext&) { return JobOutcome::Exited(0); }})
            .ok());
    JobRequest request;
    request.kind = "noop";
    for (int k = 0; k < 4; ++k) {
      request.job_id = absl::StrCat("noop-", i, "-", k);
      ASSERT_TRUE(
          worker.Dispatch(std::make_shared<CollectingJob>(request)).ok());
    }
    ASSERT_TRUE(worker.docket().WaitEmptyUntil(Now() + kTimeout));
  }
}

// Under a tiny descriptor limit the daemon runs out of descriptors: the job
// that hits it gets a status or START_FAILED, and the daemon keeps serving.
TEST(FaultDaemonTest, TinyFdLimitFailsAJobNotTheDaemon) {
  Daemon daemon({"--idle-timeout-seconds", "0", "--max-concurrent-tasks", "500",
                 "--task-kill-grace-seconds", "1"},
                {"prlimit", "--nofile=48:48"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address());
  ASSERT_TRUE(connection.ok());
  WorkerConnection& conn = **connection;
  ASSERT_TRUE(conn.IdleTime(kTimeout).ok()) << "one channel, opened up front";

  struct Attempt {
    absl::Notification settled;  // accepted, refused or ended
    absl::Notification done;     // `outcome` is set
    absl::StatusOr<JobOutcome> outcome;
  };
  std::vector<std::unique_ptr<Attempt>> attempts;
  std::vector<std::thread> threads;
  // A `sleep 300` never ends by itself here, so any attempt that is done
  // failed.
  auto first_failure = [&]() -> std::optional<std::string> {
    for (const auto& a : attempts) {
      if (!a->done.HasBeenNotified()) continue;
      return a->outcome.ok() ? a->outcome->ToString()
                             : a->outcome.status().ToString();
    }
    return std::nullopt;
  };
  for (int i = 0; i < 100 && !first_failure(); ++i) {
    auto attempt = std::make_unique<Attempt>();
    Attempt* a = attempt.get();
    attempts.push_back(std::move(attempt));
    threads.emplace_back([&conn, a, i] {
      JobRequest request = ExecRequest({"sleep", "300"});
      request.job_id = absl::StrCat("fd-", i);
      a->outcome = conn.Dispatch(
          request, {.on_accepted = [a] { a->settled.Notify(); }}, kTimeout * 2);
      a->done.Notify();
      if (!a->settled.HasBeenNotified()) a->settled.Notify();
    });
    ASSERT_TRUE(a->settled.WaitForNotificationWithTimeout(absl::Seconds(30)));
    // An accepted job that cannot start ends at once.
    a->done.WaitForNotificationWithTimeout(absl::Milliseconds(300));
  }
  const std::optional<std::string> failure = first_failure();
  ASSERT_TRUE(failure.has_value()) << "100 jobs under a 48-descriptor limit";
  std::cout << "first failure after " << attempts.size()
            << " dispatches: " << *failure << "\n";
  EXPECT_THAT(*failure, ::testing::AnyOf(HasSubstr("START_FAILED"),
                                         HasSubstr("RESOURCE_EXHAUSTED"),
                                         HasSubstr("UNAVAILABLE"),
                                         HasSubstr("INTERNAL")));
  EXPECT_TRUE(conn.IdleTime(kTimeout).ok()) << "the daemon still answers Idle";
  absl::StatusOr<StopSummary> stopped = conn.Stop(Duration::zero(), kTimeout);
  EXPECT_TRUE(stopped.ok()) << stopped.status();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
}

// A client that never reads its stream while its job writes without end:
// the worker stops reading the job's pipes, so the job blocks in write(2)
// and the daemon's memory stays bounded; the job is still in flight (not
// lost) until the client cancels, which cancels it.
TEST(FaultDaemonTest, ClientThatNeverReadsBlocksTheJobNotTheWorkersMemory) {
  Daemon daemon(
      {"--idle-timeout-seconds", "0", "--task-kill-grace-seconds", "1"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  const std::string address = daemon.address();
  auto connection = WorkerConnection::Open(address);
  ASSERT_TRUE(connection.ok());
  ASSERT_TRUE((*connection)->IdleTime(kTimeout).ok());
  const int64_t rss_before = test_support::StatusNumber(daemon.pid(), "VmRSS");
  ASSERT_GT(rss_before, 0);

  // Its own channel, so the unread stream cannot hold up the Idle calls.
  grpc::ChannelArguments args;
  args.SetInt("cfdb.test.unread", 1);
  auto stub = v1::Worker::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  JobRequest request = ExecRequest({"head", "-c", "4294967296", "/dev/zero"});
  auto reader = stub->Dispatch(&ctx, wire::ToProto(request));

  std::vector<pid_t> job;
  ASSERT_TRUE(WaitFor([&] {
    job = JobChildren(daemon.pid());
    return job.size() == 1 && BlockedInWrite(job[0]);
  })) << "the job blocks writing to its full pipe";
  const int64_t rss_blocked = test_support::StatusNumber(daemon.pid(), "VmRSS");
  ASSERT_GT(rss_blocked, 0);
  std::cout << "daemon VmRSS: " << rss_before << " kB before, " << rss_blocked
            << " kB with the job blocked\n";
  // 256 KiB outbox + 64 KiB pipe reads + HTTP/2 windows; 4 GiB unbounded.
  EXPECT_LT(rss_blocked - rss_before, 64 * 1024) << "kB";
  absl::StatusOr<double> idle = (*connection)->IdleTime(kTimeout);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(*idle, 0.0) << "the job is still in flight";

  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] {
    absl::StatusOr<double> now = (*connection)->IdleTime(kTimeout);
    return now.ok() && *now > 0;
  })) << "the cancelled job left the docket";
  EXPECT_TRUE(JobChildren(daemon.pid()).empty()) << "and its process is gone";
  ASSERT_TRUE((*connection)->Stop(Duration::zero(), kTimeout).ok());
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
}

}  // namespace
}  // namespace cfdb::worker

// Soak: many clients dispatch short exec jobs of every kind of ending at
// once while other threads poll Idle; then Stop with a grace. Everything is
// counted and checked: each accepted job ends with exactly one terminal
// event matching what it did, each refused job gets a status, Idle is 0
// whenever one of our jobs is known to be in flight, and nothing is left
// behind (child processes, zombies, descriptors).
//
// CFDB_SOAK_JOBS and CFDB_SOAK_CLIENTS size the run (`make soak` runs a long
// one; ctest a short one).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "cfdb/worker/worker.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/wire.h"
#include "support/loopback.h"
#include "support/proc_util.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::Children;
using test_support::ExecRequest;
using Failure = JobOutcome::Failure;

constexpr size_t kBigOutputBytes = 2'000'000;

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  int value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) && value > 0
             ? value
             : fallback;
}

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd")) {
    ++n;
  }
  return n;
}

// What a job does, and so how it must end.
enum class Plan {
  kExit,          // exit code i % 4
  kSignal,        // kills itself with SIGKILL
  kClientCancel,  // the client cancels the call once output arrived
  kTimeLimit,     // sleeps past a 0.2 s limit
  kBigOutput,     // writes kBigOutputBytes to stdout
  kStartFailed,   // no such program
  kInvalid,       // empty argv: refused
};
constexpr int kPlans = 7;

const char* PlanName(Plan plan) {
  switch (plan) {
    case Plan::kExit:
      return "exit";
    case Plan::kSignal:
      return "signal";
    case Plan::kClientCancel:
      return "client-cancel";
    case Plan::kTimeLimit:
      return "time-limit";
    case Plan::kBigOutput:
      return "big-output";
    case Plan::kStartFailed:
      return "start-failed";
    case Plan::kInvalid:
      return "invalid";
  }
  return "?";
}

JobRequest RequestFor(Plan plan, int i) {
  JobRequest request = ExecRequest({"true"});
  request.job_id = absl::StrCat("soak-", i);
  switch (plan) {
    case Plan::kExit:
      MutableExec(request).argv = {"sh", "-c", absl::StrCat("exit ", i % 4)};
      break;
    case Plan::kSignal:
      MutableExec(request).argv = {"sh", "-c", "kill -KILL $$"};
      break;
    case Plan::kClientCancel:
      MutableExec(request).argv = {"sh", "-c", "echo started; exec sleep 300"};
      break;
    case Plan::kTimeLimit:
      MutableExec(request).argv = {"sleep", "300"};
      MutableExec(request).time_limit = milliseconds(200);
      break;
    case Plan::kBigOutput:
      MutableExec(request).argv = {"head", "-c", absl::StrCat(kBigOutputBytes),
                                   "/dev/zero"};
      break;
    case Plan::kStartFailed:
      MutableExec(request).argv = {"/nonexistent/cfdb-soak"};
      break;
    case Plan::kInvalid:
      MutableExec(request).argv.clear();
      break;
  }
  return request;
}

// Pins tracks jobs known to be in flight (their output arrived and nobody
// cancelled them yet), so an Idle poll can tell that one was in flight for
// the whole call: pinned before, and no pin released during it.
class Pins {
 public:
  void Pin() {
    absl::MutexLock lock(&mu_);
    ++pinned_;
  }
  void Unpin() {
    absl::MutexLock lock(&mu_);
    --pinned_;
    ++released_;
  }
  std::pair<int, int64_t> Read() {
    absl::MutexLock lock(&mu_);
    return {pinned_, released_};
  }

 private:
  absl::Mutex mu_;
  int pinned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t released_ ABSL_GUARDED_BY(mu_) = 0;
};

class SoakTest : public ::testing::Test {
 protected:
  struct Counts {
    std::map<std::string, int> by_plan;  // jobs that ran or were invalid
    std::map<std::string, int> refused;  // by status code
    int accepted = 0;
    int matched = 0;
    int idle_polls = 0;
    int idle_checked_in_flight = 0;  // Idle answers while one was known running
    int64_t output_bytes = 0;
  };

  void Count(const std::function<void(Counts&)>& f) {
    absl::MutexLock lock(&mu_);
    f(counts_);
  }

  // RunJob dispatches one job of `plan` until the docket has room for it
  // (a full docket is RESOURCE_EXHAUSTED, counted, then retried).
  void RunJob(v1::Worker::Stub& stub, Plan plan, int i) {
    // A full docket is retried after a fixed 5 ms (nothing else can tell
    // us room), waiting on the monotonic clock as every wait does.
    const SteadyClock& clock = SteadyClock::Get();
    Shutdown never;
    for (int attempt = 0; attempt < 1000; ++attempt) {
      if (!TryJob(stub, plan, i)) return;
      clock.WaitUntil(clock.Now() + milliseconds(5), never.watcher());
    }
    ADD_FAILURE() << "soak-" << i << ": the docket stayed full";
  }

  // TryJob dispatches one job of `plan` and checks its stream. Returns true
  // if the docket was full, so the job should be tried again.
  bool TryJob(v1::Worker::Stub& stub, Plan plan, int i) {
    const JobRequest request = RequestFor(plan, i);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(120));
    auto reader = stub.Dispatch(&ctx, wire::ToProto(request));
    v1::DispatchEvent event;
    int accepted = 0, terminal = 0;
    int64_t bytes = 0;
    std::optional<JobOutcome> outcome;
    bool pinned = false;
    while (reader->Read(&event)) {
      if (event.has_accepted()) {
        EXPECT_EQ(accepted, 0) << request.job_id << ": accepted twice";
        ++accepted;
        continue;
      }
      EXPECT_EQ(accepted, 1) << request.job_id << ": event before accepted";
      EXPECT_EQ(terminal, 0) << request.job_id << ": event after the end";
      if (event.has_output()) {
        bytes += static_cast<int64_t>(event.output().data().size());
        if (plan == Plan::kClientCancel && !pinned) {
          // Known in flight: it printed and sleeps until we cancel.
          pins_.Pin();
          pinned = true;
          for (int k = 0; k < 3; ++k) {  // pollers get a chance too
            grpc::ClientContext idle_ctx;
            v1::IdleTime idle;
            EXPECT_TRUE(stub.Idle(&idle_ctx, v1::IdleRequest(), &idle).ok());
            EXPECT_EQ(idle.seconds(), 0.0) << request.job_id << " is in flight";
            Count([](Counts& c) { ++c.idle_checked_in_flight; });
          }
          pins_.Unpin();
          ctx.TryCancel();
        }
        continue;
      }
      outcome = wire::OutcomeOf(event);
      EXPECT_TRUE(outcome.has_value()) << request.job_id << ": unknown event";
      ++terminal;
    }
    const grpc::Status status = reader->Finish();

    std::optional<JobOutcome> expected;
    switch (plan) {
      case Plan::kExit:
        expected = JobOutcome::Exited(i % 4);
        break;
      case Plan::kSignal:
        expected = JobOutcome::Signaled(SIGKILL);
        break;
      case Plan::kBigOutput:
        expected = JobOutcome::Exited(0);
        break;
      default:
        break;
    }
    bool matched = false;
    if (accepted == 0) {
      EXPECT_FALSE(status.ok()) << request.job_id << ": no events, yet OK";
      EXPECT_EQ(terminal, 0);
      if (plan == Plan::kInvalid) {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
        matched = status.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
      } else {
        // The docket was full: the only other reason to refuse here.
        EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
            << request.job_id << ": " << status.error_message();
      }
      Count([&](Counts& c) {
        ++c.refused[absl::StrCat("code ", status.error_code())];
      });
      if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        return true;
      }
    } else if (plan == Plan::kClientCancel) {
      EXPECT_TRUE(pinned) << request.job_id << ": no output before the end";
      EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
      matched = pinned && status.error_code() == grpc::StatusCode::CANCELLED;
    } else {
      EXPECT_TRUE(status.ok())
          << request.job_id << ": " << status.error_message();
      EXPECT_EQ(terminal, 1) << request.job_id << ": terminal events";
      if (outcome.has_value()) {
        if (expected.has_value()) {
          EXPECT_EQ(*outcome, *expected) << request.job_id;
          matched = *outcome == *expected;
        } else {
          const Failure want = plan == Plan::kTimeLimit
                                   ? Failure::kTimeLimitExceeded
                                   : Failure::kStartFailed;
          EXPECT_EQ(outcome->failure, want)
              << request.job_id << ": " << outcome->ToString();
          matched = outcome->failure == want;
        }
      }
      if (plan == Plan::kBigOutput) {
        EXPECT_EQ(bytes, static_cast<int64_t>(kBigOutputBytes));
        matched = matched && bytes == static_cast<int64_t>(kBigOutputBytes);
      }
    }
    Count([&](Counts& c) {
      ++c.by_plan[PlanName(plan)];
      c.accepted += accepted;
      c.matched += matched ? 1 : 0;
      c.output_bytes += bytes;
    });
    return false;
  }

  absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  Pins pins_;
};

TEST_F(SoakTest, ManyClientsEveryEndingThenStopWithAGrace) {
  const int jobs = EnvInt("CFDB_SOAK_JOBS", 70);
  const int clients = EnvInt("CFDB_SOAK_CLIENTS", 4);
  const int capacity = std::max(1, clients - 1);  // some refusals, by design

  // gRPC keeps a few process-wide descriptors once used; count after that.
  {
    Worker warm(WorkerOptions{});
    auto server = WorkerServer::Start(warm, {.address = "127.0.0.1:0"});
    ASSERT_TRUE(server.ok());
  }
  const size_t fds_before = OpenFds();

  Worker worker(
      WorkerOptions{.max_concurrent_tasks = static_cast<size_t>(capacity),
                    .task_kill_grace = seconds(1)});
  ASSERT_TRUE(worker.RegisterKind(kExecKind, ExecKind()).ok());
  auto server = WorkerServer::Start(worker, {.address = "127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = test_support::LoopbackAddress((*server)->port());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Worker::NewStub(channel);

  std::atomic<bool> polling{true};
  std::vector<std::thread> pollers;
  for (int p = 0; p < 2; ++p) {
    pollers.emplace_back([&] {
      while (polling.load()) {
        const auto [pinned, released] = pins_.Read();
        grpc::ClientContext ctx;
        v1::IdleTime idle;
        const grpc::Status status = stub->Idle(&ctx, v1::IdleRequest(), &idle);
        const auto [pinned_after, released_after] = pins_.Read();
        EXPECT_TRUE(status.ok()) << status.error_message();
        EXPECT_GE(idle.seconds(), 0.0);
        const bool known_in_flight = pinned > 0 && released_after == released;
        if (known_in_flight) {
          EXPECT_EQ(idle.seconds(), 0.0) << "a pinned job was in flight";
        }
        Count([&](Counts& c) {
          ++c.idle_polls;
          c.idle_checked_in_flight += known_in_flight ? 1 : 0;
        });
      }
    });
  }

  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < jobs;) {
        RunJob(*stub, static_cast<Plan>(i % kPlans), i);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  // Last: jobs that finish within the grace and jobs that would not; then
  // Stop drains the first and cancels the rest.
  threads.clear();
  // Every client has seen its job's end, so the docket is empty: a job
  // leaves it before its end is told.
  EXPECT_EQ(worker.docket().in_flight(), 0u);
  const int finishing = std::max(1, capacity / 2);
  const int stuck = capacity - finishing;
  std::atomic<int> drained{0}, cancelled{0};
  absl::Mutex running_mu;
  int running = 0;  // jobs whose first output arrived
  for (int k = 0; k < capacity; ++k) {
    threads.emplace_back([&, k] {
      JobRequest request = ExecRequest(
          {"sh", "-c",
           k < finishing ? "echo up; sleep 0.3" : "echo up; exec sleep 300"});
      request.job_id = absl::StrCat("stop-", k);
      grpc::ClientContext ctx;
      auto reader = stub->Dispatch(&ctx, wire::ToProto(request));
      v1::DispatchEvent event;
      std::optional<JobOutcome> outcome;
      while (reader->Read(&event)) {
        if (event.has_output()) {  // running, and counted once ("echo up")
          absl::MutexLock lock(&running_mu);
          ++running;
        }
        if (auto o = wire::OutcomeOf(event)) outcome = o;
      }
      EXPECT_TRUE(reader->Finish().ok());
      ASSERT_TRUE(outcome.has_value());
      if (k < finishing) {
        EXPECT_EQ(*outcome, JobOutcome::Exited(0));
        ++drained;
      } else {
        EXPECT_EQ(outcome->failure, Failure::kCancelled);
        ++cancelled;
      }
    });
  }
  {
    absl::MutexLock lock(&running_mu);
    auto all_running = [&] { return running >= capacity; };
    running_mu.AwaitWithTimeout(absl::Condition(&all_running),
                                absl::Seconds(60));
    EXPECT_EQ(running, capacity) << "every last job is running";
  }
  const StopSummary summary = worker.Stop(seconds(5));
  for (std::thread& t : threads) t.join();
  polling = false;
  for (std::thread& t : pollers) t.join();
  EXPECT_EQ(summary.drained, static_cast<size_t>(finishing));
  EXPECT_EQ(summary.cancelled, static_cast<size_t>(stuck));
  EXPECT_EQ(drained.load(), finishing);
  EXPECT_EQ(cancelled.load(), stuck);

  (*server)->Shutdown(seconds(5));
  server->reset();
  stub.reset();
  channel.reset();
  EXPECT_TRUE(Children(getpid()).empty())
      << "no child process or zombie is left";
  // Sockets close asynchronously after the server and channel are gone.
  test_support::WaitFor([&] { return OpenFds() <= fds_before; });
  const size_t fds_after = OpenFds();
  EXPECT_LE(fds_after, fds_before);

  absl::MutexLock lock(&mu_);
  const Counts& c = counts_;
  int refused = 0;
  for (const auto& [code, n] : c.refused) refused += n;
  std::cout << "soak: " << jobs << " jobs, " << clients << " clients, docket "
            << capacity << "\n  by plan:";
  for (const auto& [plan, n] : c.by_plan) std::cout << " " << plan << "=" << n;
  std::cout << "\n  accepted=" << c.accepted << " refused=" << refused << " (";
  for (const auto& [code, n] : c.refused)
    std::cout << code << ": " << n << "; ";
  std::cout << ") matched=" << c.matched << " output_bytes=" << c.output_bytes
            << "\n  idle polls=" << c.idle_polls
            << " idle checks with a job known in flight="
            << c.idle_checked_in_flight
            << "\n  stop: drained=" << summary.drained
            << " cancelled=" << summary.cancelled
            << "\n  fds before=" << fds_before << " after=" << fds_after
            << " children left=" << Children(getpid()).size() << "\n";
  // Every job ran (or was refused as invalid) as planned, once.
  EXPECT_EQ(c.matched, jobs);
  const int invalid =
      c.by_plan.count("invalid") != 0 ? c.by_plan.at("invalid") : 0;
  EXPECT_EQ(c.accepted + invalid, jobs);
}

}  // namespace
}  // namespace cfdb::worker

// A real worker over a real channel: WorkerServer on port 0, WorkerConnection.
#include "cfdb/worker/worker.h"

#include <poll.h>
#include <sys/resource.h>

#include <cctype>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "support/background_dispatch.h"
#include "support/feed.h"
#include "support/loopback.h"
#include "support/served_worker.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::ExecRequest;
using ::testing::HasSubstr;
using Failure = JobOutcome::Failure;
namespace v1 = ::cfdb::worker::v1;

constexpr auto kTimeout = seconds(30);

using WorkerTest = test_support::ServedWorkerTest;

TEST_F(WorkerTest, FreshWorkerIdleIsPositiveAndNonDecreasing) {
  absl::StatusOr<double> first = connection_->IdleTime(kTimeout);
  absl::StatusOr<double> second = connection_->IdleTime(kTimeout);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(*first, 0);
  EXPECT_GE(*second, *first);
}

TEST_F(WorkerTest, IdleIsZeroWhileAJobIsInFlight) {
  test_support::BackgroundDispatch job(address(),
                                       ExecRequest({"sleep", "300"}));
  absl::StatusOr<double> idle = connection_->IdleTime(kTimeout);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(*idle, 0.0);
  worker_->Stop(Duration::zero());
  const absl::StatusOr<JobOutcome> outcome = job.Outcome();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, Failure::kCancelled);
}

TEST_F(WorkerTest, ServerWithoutIdleIsIdleUnavailableNotAnRpcError) {
  v1::Worker::CallbackService bare;  // every method UNIMPLEMENTED
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&bare);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto connection = WorkerConnection::Open(test_support::LoopbackAddress(port));
  ASSERT_TRUE(connection.ok());
  absl::StatusOr<double> idle = (*connection)->IdleTime(kTimeout);
  ASSERT_FALSE(idle.ok());
  EXPECT_EQ(ClassifyError(Rpc::kIdle, idle.status()),
            ErrorKind::kIdleUnavailable);
  server->Shutdown();
}

TEST_F(WorkerTest, PollStopThenALaterPollIsTransient) {
  ASSERT_TRUE(connection_->IdleTime(kTimeout).ok());
  absl::StatusOr<StopSummary> stopped = connection_->Stop(seconds(5), kTimeout);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  server_->Shutdown(seconds(5));
  absl::StatusOr<double> idle = connection_->IdleTime(seconds(5));
  ASSERT_FALSE(idle.ok());
  EXPECT_EQ(ClassifyError(Rpc::kIdle, idle.status()), ErrorKind::kTransient);
}

TEST_F(WorkerTest, HealthIsServingUntilTheDrainBegins) {
  absl::StatusOr<WorkerConnection::ServingStatus> health =
      connection_->Health(kTimeout);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, WorkerConnection::ServingStatus::kServing);

  test_support::BackgroundDispatch job(address(),
                                       ExecRequest({"sleep", "300"}));
  absl::Notification draining;
  worker_->OnStopping([&] { draining.Notify(); });
  std::thread stopper([this] { worker_->Stop(seconds(300)); });
  ASSERT_TRUE(draining.WaitForNotificationWithTimeout(absl::Seconds(30)));
  health = connection_->Health(kTimeout);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, WorkerConnection::ServingStatus::kNotServing)
      << "a draining worker takes no new work";
  worker_->Stop(Duration::zero());
  stopper.join();
  (void)job.Outcome();
}

TEST_F(WorkerTest, ClosedConnectionRefusesCallsAndASecondClose) {
  ASSERT_TRUE(connection_->Close().ok());
  EXPECT_EQ(connection_->IdleTime(kTimeout).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(connection_->Close().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerTest, NonPositiveTimeoutIsRejectedWithoutACall) {
  EXPECT_EQ(connection_->IdleTime(Duration::zero()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(connection_->IdleTime(-seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(connection_->Stop(seconds(1), Duration::zero()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(worker_->stopping()) << "no Stop reached the worker";
}

TEST_F(WorkerTest, DrainLetsARunningJobFinishWithinTheGrace) {
  test_support::BackgroundDispatch job(
      address(), ExecRequest({"sh", "-c", "sleep 0.5; echo finished"}));
  absl::StatusOr<StopSummary> stopped =
      connection_->Stop(seconds(60), kTimeout);
  const absl::StatusOr<JobOutcome> outcome = job.Outcome();
  const std::string out = job.out();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->drained, 1u);
  EXPECT_EQ(stopped->cancelled, 0u);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, "finished\n");
}

TEST_F(WorkerTest, StopWithoutGraceCancelsARunningJob) {
  test_support::BackgroundDispatch job(
      address(), ExecRequest({"sh", "-c", "sleep 0.5; echo finished"}));
  absl::StatusOr<StopSummary> stopped =
      connection_->Stop(Duration::zero(), kTimeout);
  const absl::StatusOr<JobOutcome> outcome = job.Outcome();
  const std::string out = job.out();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->cancelled, 1u);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->failure, Failure::kCancelled);
  EXPECT_EQ(out, "");
}

TEST_F(WorkerTest, StoppingWorkerRefusesNewJobsAsUnavailable) {
  worker_->Stop(Duration::zero());
  absl::StatusOr<JobOutcome> outcome =
      connection_->Dispatch(ExecRequest({"true"}), {});
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(WorkerTest, FullDocketRefusesWithResourceExhausted) {
  Start(1);
  test_support::BackgroundDispatch job(address(),
                                       ExecRequest({"sleep", "300"}));
  absl::StatusOr<JobOutcome> second =
      connection_->Dispatch(ExecRequest({"true"}), {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, second.status()),
            ErrorKind::kTransient);
  worker_->Stop(Duration::zero());
  (void)job.Outcome();
}

TEST_F(WorkerTest, RefusedDispatchDoesNotResetIdle) {
  absl::StatusOr<double> before = connection_->IdleTime(kTimeout);
  JobRequest bad = ExecRequest({});
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(bad, {});
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(outcome.status().message()), HasSubstr("exec.argv"));
  absl::StatusOr<double> after = connection_->IdleTime(kTimeout);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_GE(*after, *before);
}

TEST_F(WorkerTest, BadRequestsGetInvalidArgumentNamingTheField) {
  JobRequest no_id = ExecRequest({"true"});
  no_id.job_id = "";
  JobRequest unknown = ExecRequest({"true"});
  unknown.kind = "teleport";
  JobRequest nul = ExecRequest({std::string("tr\0ue", 5)});
  JobRequest bad_env = ExecRequest({"true"});
  MutableExec(bad_env).env["A=B"] = "c";
  for (const auto& [request, field] :
       std::vector<std::pair<JobRequest, std::string>>{{no_id, "job_id"},
                                                       {unknown, "kind"},
                                                       {nul, "exec.argv[0]"},
                                                       {bad_env, "exec.env"}}) {
    absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(request, {});
    EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(outcome.status().message()), HasSubstr(field));
  }
}

TEST_F(WorkerTest, StreamsSeveralMebibytesByteExact) {
  JobRequest request = ExecRequest({"cat"});
  MutableExec(request).stdin_data = test_support::RandomBytes(6 << 20, 7);
  std::string out;
  bool accepted = false;
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(
      request, {.on_accepted = [&] { accepted = true; },
                .on_output =
                    [&](OutputStream stream, std::string_view data) {
                      EXPECT_EQ(stream, OutputStream::kStdout);
                      EXPECT_TRUE(accepted) << "acceptance comes first";
                      out.append(data);
                    }});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_TRUE(out == MutableExec(request).stdin_data) << out.size() << " bytes";
}

TEST_F(WorkerTest, ClientCancelKillsTheJob) {
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(
      ExecRequest({"sleep", "300"}), {}, std::chrono::milliseconds(300));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(worker_->docket().WaitEmptyUntil(
      std::chrono::steady_clock::now() + kTimeout))
      << "the job left the docket once its client went away";
}

TEST_F(WorkerTest, EmbeddedKindRunsItsHandler) {
  JobRequest request;
  request.job_id = "embedded";
  request.kind = "echo";
  request.payload = std::string("hello\0world", 11);
  std::string out;
  absl::StatusOr<JobOutcome> outcome = connection_->Dispatch(
      request, {.on_output = [&](OutputStream, std::string_view data) {
        out.append(data);
      }});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, request.payload);
}

// RawStream drives DispatchStream with the generated stub, for what
// WorkerConnection never sends: messages out of order, an input without its
// end_of_input.
struct RawStream {
  explicit RawStream(int port)
      : stub(v1::Worker::NewStub(
            grpc::CreateChannel(test_support::LoopbackAddress(port),
                                grpc::InsecureChannelCredentials()))) {
    context.set_deadline(std::chrono::system_clock::now() + kTimeout);
    stream = stub->DispatchStream(&context);
  }
  void Request(std::vector<std::string> argv) {
    v1::DispatchInput input;
    input.mutable_request()->set_job_id("raw");
    input.mutable_request()->set_kind("exec");
    for (std::string& arg : argv) {
      input.mutable_request()->mutable_exec()->add_argv(std::move(arg));
    }
    EXPECT_TRUE(stream->Write(input));
  }
  void Stdin(std::string bytes) {
    v1::DispatchInput input;
    input.set_stdin(std::move(bytes));
    EXPECT_TRUE(stream->Write(input));
  }
  // Finish half-closes, reads every event and returns the call's status;
  // `events` gets each event's case, `out` the output.
  grpc::Status Finish() {
    stream->WritesDone();
    for (v1::DispatchEvent event; stream->Read(&event);) {
      events.push_back(event.event_case());
      if (event.has_output()) out += event.output().data();
    }
    return stream->Finish();
  }

  std::unique_ptr<v1::Worker::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::DispatchInput, v1::DispatchEvent>>
      stream;
  std::vector<v1::DispatchEvent::EventCase> events;
  std::string out;
};

// Only end_of_input ends a streamed input: a half-close without it has cut
// the input short, and the job must never take that for its whole input.
TEST_F(WorkerTest, AStreamedInputCutShortCancelsItsJob) {
  RawStream raw(server_->port());
  raw.Request({"sh", "-c", "cat; echo ' <- whole'"});
  raw.Stdin("partial");
  const grpc::Status status = raw.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("end_of_input"));
  EXPECT_THAT(raw.out, ::testing::Not(HasSubstr("whole")));
  EXPECT_TRUE(worker_->docket().WaitEmptyUntil(
      std::chrono::steady_clock::now() + kTimeout));
  EXPECT_EQ(worker_->counts().cancelled, 1u);
}

// The request comes first and once; chunks after it.
TEST_F(WorkerTest, DispatchStreamMessagesOutOfOrderAreInvalid) {
  RawStream early(server_->port());
  early.Stdin("too soon");
  EXPECT_EQ(early.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(early.events.empty()) << "refused before any event";

  RawStream twice(server_->port());
  twice.Request({"cat"});
  twice.Request({"cat"});
  EXPECT_EQ(twice.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(worker_->docket().WaitEmptyUntil(
      std::chrono::steady_clock::now() + kTimeout));
  EXPECT_EQ(worker_->counts().succeeded, 0u);
}

// An embedded kind reads streamed stdin through its context: TakeStdin,
// waiting on stdin_fd in poll(2) with the cancel descriptor.
TEST_F(WorkerTest, AnEmbeddedKindReadsStreamedStdin) {
  ASSERT_TRUE(
      worker_
          ->RegisterKind("upper",
                         {.run =
                              [](JobContext& ctx) {
                                std::string chunk;
                                for (;;) {
                                  switch (ctx.TakeStdin(chunk)) {
                                    case JobContext::StdinResult::kChunk:
                                      for (char& c : chunk) c = std::toupper(c);
                                      ctx.Emit(OutputStream::kStdout, chunk);
                                      break;
                                    case JobContext::StdinResult::kEnd:
                                      return JobOutcome::Exited(0);
                                    case JobContext::StdinResult::kNotYet: {
                                      pollfd fds[2] = {
                                          {ctx.stdin_fd(), POLLIN, 0},
                                          {ctx.cancel_fd(), POLLIN, 0}};
                                      poll(fds, 2, -1);
                                      if (ctx.cancelled()) {
                                        return JobOutcome::Failed(
                                            Failure::kCancelled, "cancelled");
                                      }
                                    }
                                  }
                                }
                              }})
          .ok());
  JobRequest request;
  request.job_id = "upper";
  request.kind = "upper";
  const std::string input(300'000, 'q');
  test_support::Feed feed(input);
  std::string out;
  absl::StatusOr<JobOutcome> outcome = connection_->DispatchStream(
      request, feed.read_fd(),
      {.on_output = [&](OutputStream,
                        std::string_view data) { out.append(data); }},
      kTimeout);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, std::string(300'000, 'Q'));
}

TEST(WorkerNiceTest, ProgramsOfJobsRunAtTheAddedNiceValue) {
  errno = 0;
  const int base = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  if (base > 9) GTEST_SKIP() << "the test runs at nice " << base;
  Worker worker(WorkerOptions{.job_nice = 10});
  ASSERT_TRUE(worker.RegisterKind(kExecKind, ExecKind()).ok());
  auto job =
      std::make_shared<test_support::CollectingJob>(ExecRequest({"nice"}));
  ASSERT_TRUE(worker.Dispatch(job).ok());
  // The job leaves the docket just before its end is told.
  ASSERT_TRUE(test_support::WaitFor([&] { return job->outcome().has_value(); },
                                    kTimeout));
  EXPECT_EQ(job->outcome(), JobOutcome::Exited(0));
  EXPECT_EQ(job->out(), absl::StrCat(base + 10, "\n"));
}

TEST(WorkerRegistryTest, RefusesDuplicateAndEmptyKinds) {
  Worker worker(WorkerOptions{});
  EXPECT_TRUE(worker.RegisterKind("exec", ExecKind()).ok());
  EXPECT_EQ(worker.RegisterKind("exec", ExecKind()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(worker.RegisterKind("", ExecKind()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cfdb::worker

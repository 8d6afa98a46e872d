// examples/reverse_worker.cc, run as an embedder's program would be: it
// serves its own job kind through cfdb::worker::Serve and retires itself
// when idle, as `cfdb-worker serve` does.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/temp_dir.h"
#include "support/test_job.h"

namespace cfdb::worker {
namespace {

using test_support::Daemon;
using test_support::Program;
using ::testing::HasSubstr;

constexpr Duration kCallTimeout = std::chrono::seconds(30);

TEST(ReverseWorkerTest, ServesItsOwnKindThenRetiresWhenIdle) {
  Daemon worker(
      Program{CFDB_REVERSE_WORKER_PATH},
      {"--idle-timeout-seconds", "2", "--idle-poll-interval-seconds", "0.2"});
  ASSERT_GT(worker.port(), 0) << worker.log();
  auto connection = WorkerConnection::Open(worker.address());
  ASSERT_TRUE(connection.ok());

  std::string out;
  absl::StatusOr<JobOutcome> outcome =
      (*connection)
          ->Dispatch(
              {.job_id = "r1", .kind = "reverse", .payload = "stressed"},
              {.on_output = [&](OutputStream,
                                std::string_view data) { out.append(data); }},
              kCallTimeout);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, "desserts");

  // The kind's validator refuses before anything runs; the exec kind is
  // not registered (ServeOptions::exec_kind).
  absl::StatusOr<JobOutcome> big =
      (*connection)
          ->Dispatch({.job_id = "r2",
                      .kind = "reverse",
                      .payload = std::string(2 << 20, 'x')},
                     {}, kCallTimeout);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status())) << big.status();
  EXPECT_THAT(big.status().message(), HasSubstr("payload"));
  absl::StatusOr<JobOutcome> exec =
      (*connection)
          ->Dispatch(test_support::ExecRequest({"true"}), {}, kCallTimeout);
  EXPECT_TRUE(absl::IsInvalidArgument(exec.status())) << exec.status();

  // Idle from the last job's end: it retires as the binary would, exit 0.
  EXPECT_EQ(worker.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(worker.log(), HasSubstr("exiting: idle for"));
  EXPECT_THAT(worker.log(), HasSubstr("stopped"));
}

TEST(ReverseWorkerTest, TheCommandLineDispatchesToItsKind) {
  Daemon worker(Program{CFDB_REVERSE_WORKER_PATH}, {});
  test_support::TempDir dir;
  const std::string payload_file = dir.path("payload");
  std::ofstream(payload_file, std::ios::binary) << std::string("ab\0c", 4);

  test_support::CollectingJob from_file(test_support::Command(
      {"dispatch", "--address", worker.address(), "--kind", "reverse",
       "--payload-file", payload_file}));
  EXPECT_EQ(RunExec(from_file), JobOutcome::Exited(0)) << from_file.err();
  EXPECT_EQ(from_file.out(), std::string("c\0ba", 4)) << "byte-exact";

  test_support::CollectingJob inline_payload(
      test_support::Command({"dispatch", "--address", worker.address(),
                             "--kind", "reverse", "--payload", "stressed"}));
  EXPECT_EQ(RunExec(inline_payload), JobOutcome::Exited(0));
  EXPECT_EQ(inline_payload.out(), "desserts");

  // Refused by its validator: a deterministic error, nothing ran.
  const std::string big_file = dir.path("big");
  std::ofstream(big_file) << std::string(2 << 20, 'x');
  test_support::CollectingJob big(
      test_support::Command({"dispatch", "--address", worker.address(),
                             "--kind", "reverse", "--payload-file", big_file}));
  EXPECT_EQ(RunExec(big), JobOutcome::Exited(76));
  EXPECT_THAT(big.err(), HasSubstr("payload: 2097152 bytes"));

  // Refused before any call (exit 2): a program, or exec's flags, with
  // another kind; a payload file that cannot be read; a payload for exec.
  const struct {
    std::vector<std::string> flags;
    std::string says;
  } refusals[] = {
      {{"--kind", "reverse", "--", "true"},
       "'true' after --: a job of --kind reverse takes no program"},
      {{"--kind", "reverse", "--payload", "x", "--env", "A=1"},
       "--env: only for the exec kind, not --kind reverse"},
      {{"--kind", "reverse", "--payload-file", dir.path("none")},
       "--payload-file: cannot read"},
      {{"--payload", "x", "--", "true"},
       "--payload: the exec kind takes no payload"},
  };
  for (const auto& refusal : refusals) {
    std::vector<std::string> args = {"dispatch", "--address", worker.address()};
    args.insert(args.end(), refusal.flags.begin(), refusal.flags.end());
    test_support::CollectingJob refused(test_support::Command(args));
    EXPECT_EQ(RunExec(refused), JobOutcome::Exited(2)) << refusal.says;
    EXPECT_THAT(refused.err(), HasSubstr(refusal.says));
  }
}

TEST(ReverseWorkerTest, RefusesAFlagServeDoesNotHave) {
  test_support::CollectingJob run(test_support::ExecRequest(
      {CFDB_REVERSE_WORKER_PATH, "--idle-timeout", "2"}));
  EXPECT_EQ(RunExec(run), JobOutcome::Exited(2)) << "as serve's exit code";
  EXPECT_EQ(run.err(),
            "reverse_worker: --idle-timeout: not a flag of serve; did you "
            "mean --idle-timeout-seconds?\n");
}

}  // namespace
}  // namespace cfdb::worker

// Streamed stdin (issue 16) on a real worker: any size, a job that stops
// reading, a client that goes away mid-upload, time limits and --timeout
// while the input is silent, and flow control that holds a fast producer
// back while the job does not read. Byte-for-byte round trips over every
// transport are in transport_test.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/feed.h"
#include "support/proc_util.h"
#include "support/temp_dir.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::CollectingJob;
using test_support::Daemon;
using test_support::ExecRequest;
using test_support::Feed;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Fifo is a named pipe in a private directory, held open for writing (so
// a reader blocks on it instead of seeing its end) until Write or the end.
class Fifo {
 public:
  Fifo() : path_(dir_.path("in")) {
    EXPECT_EQ(mkfifo(path_.c_str(), 0600), 0);
    fd_ = open(path_.c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(fd_, 0);
  }
  ~Fifo() { close(fd_); }
  const std::string& path() const { return path_; }
  void Write(std::string_view text) {
    EXPECT_EQ(write(fd_, text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
  }

 private:
  test_support::TempDir dir_;
  const std::string path_;
  int fd_ = -1;
};

class StdinTest : public ::testing::Test {
 protected:
  StdinTest()
      : daemon_({"--idle-timeout-seconds", "0"},
                test_support::HeapLikeProduction()) {}

  // Shell runs `script` with $CFDB set to `cfdb-worker ... --address A`.
  JobRequest Shell(const std::string& script) const {
    JobRequest request = ExecRequest({"/bin/sh", "-c", script});
    MutableExec(request).env = {
        {"PATH", "/usr/bin:/bin"},
        {"CFDB", absl::StrCat(test_support::Binary(), " dispatch --address ",
                              daemon_.address())}};
    MutableExec(request).time_limit = seconds(120);
    return request;
  }
  std::unique_ptr<WorkerConnection> Connect() const {
    return *WorkerConnection::Open(daemon_.address());
  }
  bool Busy() const { return Connect()->IdleTime(seconds(5)).value_or(1) == 0; }

  Daemon daemon_;
};

// A 70 MB input was over the message limit when stdin travelled in the
// request; streamed, it is just bytes.
TEST_F(StdinTest, SeventyMegabytesGoThrough) {
  JobRequest request = Shell("exec $CFDB -- wc -c");
  MutableExec(request).stdin_data.assign(70'000'000, 'x');
  CollectingJob dispatch(request);
  EXPECT_EQ(RunExec(dispatch), JobOutcome::Exited(0)) << dispatch.err();
  EXPECT_EQ(dispatch.out(), "70000000\n");
}

// With stdin closed (`<&-`) the job gets an empty one: fd 0 is /dev/null,
// not whatever descriptor gRPC opens next.
TEST_F(StdinTest, AClosedStdinReadsAsEmpty) {
  CollectingJob dispatch(Shell("exec $CFDB -- wc -c <&-"));
  EXPECT_EQ(RunExec(dispatch), JobOutcome::Exited(0)) << dispatch.err();
  EXPECT_EQ(dispatch.out(), "0\n");
}

// A job that exits without reading its input, or that closes its stdin and
// goes on, ends the upload cleanly: the job's own outcome, no error, and
// the client stops reading its input (a producer that never ends is not
// drained to the job's end).
TEST_F(StdinTest, AJobThatStopsReadingEndsTheUploadCleanly) {
  auto connection = Connect();
  for (const char* script :
       {"head -c 10", "true", "exec 0<&-; sleep 1; echo done"}) {
    Feed endless(test_support::RandomBytes(kMiB), /*repeat=*/true);
    std::string out;
    absl::StatusOr<JobOutcome> outcome = connection->DispatchStream(
        ExecRequest({"/bin/sh", "-c", script}), endless.read_fd(),
        {.on_output = [&](OutputStream,
                          std::string_view bytes) { out.append(bytes); }},
        seconds(60));
    ASSERT_TRUE(outcome.ok()) << script << ": " << outcome.status();
    EXPECT_EQ(*outcome, JobOutcome::Exited(0)) << script;
    EXPECT_LT(endless.written(), 64 * kMiB)
        << script << ": the client went on reading an input nobody takes";
    if (std::string_view(script).starts_with("exec")) {
      EXPECT_EQ(out, "done\n");
    }
  }
  // The same from the command line, with a producer that never ends.
  CollectingJob yes(Shell("yes | $CFDB -- head -c 2"));
  EXPECT_EQ(RunExec(yes), JobOutcome::Exited(0)) << yes.err();
  EXPECT_EQ(yes.out(), "y\n");
  EXPECT_EQ(yes.err(), "");
  const std::string log = daemon_.log();
  const std::string since_jobs = log.substr(log.find("job test-job"));
  EXPECT_THAT(since_jobs, Not(HasSubstr("warning"))) << "no error spam";
  EXPECT_THAT(since_jobs, Not(HasSubstr("error")));
}

// A client that goes away mid-upload cancels its job, and the worker's
// memory comes back to what it was idle.
TEST_F(StdinTest, AClientGoneMidUploadCancelsItsJob) {
  // Idle after one upload that ended well: its job thread, the
  // connection and the allocator's caches are what any worker has.
  CollectingJob warm_up(
      Shell("head -c 64000000 /dev/zero | exec $CFDB -- "
            "sh -c 'exec cat >/dev/null'"));
  ASSERT_EQ(RunExec(warm_up), JobOutcome::Exited(0)) << warm_up.err();
  ASSERT_TRUE(test_support::WaitFor([&] { return !Busy(); }));
  const int64_t idle_kib = test_support::StatusNumber(daemon_.pid(), "VmRSS");
  ASSERT_GT(idle_kib, 0);
  // Cancelling the command signals its whole group: the producer ignores
  // SIGTERM, or its death would end the input properly (an end of file,
  // as in any pipeline) before the client's own death cuts it short.
  CollectingJob dispatch(
      Shell("(trap '' TERM; exec head -c 100000000000 /dev/zero) | "
            "exec $CFDB -- sh -c 'exec cat >/dev/null'"));
  std::thread client([&] { RunExec(dispatch); });
  ASSERT_TRUE(test_support::WaitFor([&] { return Busy(); })) << daemon_.log();
  dispatch.Cancel();
  client.join();
  EXPECT_TRUE(daemon_.WaitForLog("outcome=CANCELLED")) << daemon_.log();
  ASSERT_TRUE(test_support::WaitFor([&] { return !Busy(); }));
  // malloc_trim runs every 2 s; allow for pages the first job made.
  EXPECT_TRUE(test_support::WaitFor([&] {
    return test_support::StatusNumber(daemon_.pid(), "VmRSS") <
           idle_kib + 16384;
  })) << "VmRSS "
      << test_support::StatusNumber(daemon_.pid(), "VmRSS") << " KiB, idle "
      << idle_kib << " KiB";
}

// The job's time limit and the client's --timeout both count while the
// input is silent: a FIFO open for writing but never written.
TEST_F(StdinTest, TimeLimitAndTimeoutBoundASilentInput) {
  Fifo fifo;
  CollectingJob limited(
      Shell(absl::StrCat("exec $CFDB --time-limit 1 -- cat < ", fifo.path())));
  EXPECT_EQ(RunExec(limited), JobOutcome::Exited(124)) << limited.err();
  EXPECT_THAT(limited.err(), HasSubstr("time limit"));

  CollectingJob timed(
      Shell(absl::StrCat("exec $CFDB --timeout 1 -- cat < ", fifo.path())));
  EXPECT_EQ(RunExec(timed), JobOutcome::Exited(73)) << timed.err();
  EXPECT_THAT(timed.err(), HasSubstr("accepted, deadline exceeded"));
  EXPECT_TRUE(daemon_.WaitForLog("outcome=CANCELLED")) << daemon_.log();
}

// Input and output stream as they are produced: each line comes back
// while the input is still open (the next is written only once the last
// came back), as in `producer | dispatch -- cat` with a producer that
// never ends.
TEST_F(StdinTest, EachLineComesBackWhileTheInputStaysOpen) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  absl::Mutex mu;
  std::string out;
  absl::StatusOr<JobOutcome> outcome;
  std::thread client([&] {
    outcome = Connect()->DispatchStream(
        ExecRequest({"cat"}), fds[0],
        {.on_output =
             [&](OutputStream, std::string_view bytes) {
               absl::MutexLock lock(&mu);
               out.append(bytes);
             }},
        seconds(60));
  });
  std::string expected;
  for (int line = 1; line <= 5; ++line) {
    const std::string text = absl::StrCat("line ", line, "\n");
    ASSERT_EQ(write(fds[1], text.data(), text.size()),
              static_cast<ssize_t>(text.size()));
    expected += text;
    absl::MutexLock lock(&mu);
    auto back = [&]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu) { return out == expected; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&back), absl::Seconds(30)))
        << "line " << line << " did not come back; got '" << out << "'";
  }
  close(fds[1]);
  client.join();
  close(fds[0]);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
}

// While the job does not read, a producer that could write without end is
// held back by flow control: the client, the connection and the worker
// together take a bounded amount. Once the job reads, every byte arrives.
TEST_F(StdinTest, ASlowConsumerHoldsTheProducerBack) {
  Fifo go;
  const std::size_t total = 256 * kMiB;
  Feed feed(std::string(total, 'z'));
  absl::StatusOr<JobOutcome> outcome;
  std::string out;
  std::thread client([&] {
    outcome = Connect()->DispatchStream(
        ExecRequest({"/bin/sh", "-c",
                     absl::StrCat("read go < ", go.path(), "; exec wc -c")}),
        feed.read_fd(),
        {.on_output = [&](OutputStream,
                          std::string_view bytes) { out.append(bytes); }},
        seconds(120));
  });
  // Wait until the producer is stuck: no progress over 10 samples in a row.
  std::size_t last = SIZE_MAX;
  int still = 0;
  ASSERT_TRUE(test_support::WaitFor([&] {
    const std::size_t now = feed.written();
    still = now == last ? still + 1 : 0;
    last = now;
    return still >= 10 || now == total;
  }));
  EXPECT_LT(last, 64 * kMiB) << "taken in while the job read nothing";
  go.Write("go\n");
  client.join();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, JobOutcome::Exited(0));
  EXPECT_EQ(out, absl::StrCat(total, "\n"));
  RecordProperty("held_back_bytes", std::to_string(last));
}

}  // namespace
}  // namespace cfdb::worker

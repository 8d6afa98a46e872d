// The job sandbox, on real daemons run as root (as the image runs them):
// jobs of another user cannot reach the worker's secrets or the worker; no
// process a job starts outlives it, whatever it does to its process group
// or session, under either containment; one job's leftovers cannot touch
// the next job; a fork loop cannot starve the worker or another job.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "exec/cgroup.h"
#include "exec/spawn.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/proc_util.h"
#include "support/test_job.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::Daemon;
using test_support::ExecRequest;
using test_support::WaitFor;
using ::testing::HasSubstr;

constexpr auto kTimeout = seconds(60);
// The job user's first uid: it needs no entry in the user database.
constexpr char kJobUser[] = "20000";
// The attacker's, a range of its own: what it does to every process of its
// uid it can reach must not reach other tests' jobs, which run at the same
// time as kJobUser (docs/SECURITY.md: a job user's range is the worker's
// own on its host).
constexpr char kAttackerJobUser[] = "21000";

TimePoint Now() { return std::chrono::steady_clock::now(); }

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "jobs of another user need root";
  }
};

// RunJob dispatches `argv` and returns its stdout, or the failure.
std::string RunJob(WorkerConnection& connection, std::vector<std::string> argv,
                   std::optional<JobOutcome>* outcome = nullptr) {
  std::string out;
  absl::StatusOr<JobOutcome> result = connection.Dispatch(
      ExecRequest(std::move(argv)),
      {.on_output = [&](OutputStream, std::string_view d) { out.append(d); }},
      kTimeout);
  if (!result.ok()) return "dispatch failed: " + result.status().ToString();
  if (outcome != nullptr) *outcome = *result;
  return out;
}

std::unique_ptr<WorkerConnection> Connect(const Daemon& daemon) {
  auto connection = WorkerConnection::Open(daemon.address());
  EXPECT_TRUE(connection.ok());
  return *std::move(connection);
}

// A job runs without privileges, with exactly fds 0-2, and can reach
// neither the credentials, nor the worker, nor PID 1's environment.
TEST_F(SandboxTest, AJobReachesNoSecretAndNotTheWorker) {
  test_support::TestPki pki;
  const test_support::Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  std::filesystem::permissions(pki.dir(), std::filesystem::perms(0755));
  for (const std::string& file : {pki.ca().cert, worker.cert, worker.key}) {
    chmod(file.c_str(), 0600);
  }
  // The daemon starts with an extra descriptor it inherited without
  // close-on-exec, as a careless launcher leaves them.
  Daemon daemon(
      {"--job-user", kJobUser, "--tls-ca", pki.ca().cert, "--tls-cert",
       worker.cert, "--tls-key", worker.key, "--idle-timeout-seconds", "0"},
      {"sh", "-c", "exec 7</dev/null; exec \"$@\"", "sh"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  auto connection = WorkerConnection::Open(daemon.address(), pki.Mtls(worker));
  ASSERT_TRUE(connection.ok());
  const std::string pid = absl::StrCat(daemon.pid());
  const std::string script = absl::StrCat(
      "id -u; ls /proc/self/fd | tr '\\n' ' '; echo;"
      "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status;"
      "for f in ",
      worker.key, " ", pki.ca().cert, " /proc/1/environ /proc/", pid,
      "/environ /proc/", pid,
      "/mem; do cat $f >/dev/null 2>&1 && echo read:$f;"
      " done;"
      "(echo x >> ",
      pki.ca().cert,
      ") 2>/dev/null && echo wrote-ca;"
      "kill -0 ",
      pid,
      " 2>/dev/null && echo signalled;"
      "python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); "
      "sys.exit(0 if l.ptrace(16,",
      pid,
      ",0,0)==0 else 1)' && echo traced;"
      "pwd");
  std::optional<JobOutcome> outcome;
  const std::string out = RunJob(**connection, {"sh", "-c", script}, &outcome);
  EXPECT_EQ(outcome, JobOutcome::Exited(0)) << out;
  const std::vector<std::string> lines = absl::StrSplit(out, '\n');
  ASSERT_GE(lines.size(), 5u) << out;
  EXPECT_EQ(lines[0], "20000") << "a job runs as the job user";
  EXPECT_EQ(lines[1], "0 1 2 3 ") << "fds 0-2, and the one ls opens";
  EXPECT_THAT(out, HasSubstr("CapPrm:\t0000000000000000"));
  EXPECT_THAT(out, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("read:")))
      << "no secret is readable";
  EXPECT_THAT(out, ::testing::Not(HasSubstr("wrote-ca")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("signalled")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("traced")));
  EXPECT_EQ(lines[lines.size() - 2], "/tmp") << "a directory the job may use";
  EXPECT_TRUE((*connection)->Stop(Duration::zero(), kTimeout).ok());
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
}

// ProcStatus returns a "Name:\tvalue" line's value of /proc/<pid>/status.
std::string ProcStatus(pid_t pid, const std::string& name) {
  std::istringstream in(
      test_support::ProcFile(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(name + ":\t")) return line.substr(name.size() + 2);
  }
  return "";
}

// Started as root, as the image starts it, with the PEMs in variables (as
// ECS hands them over): the worker becomes its own user with only
// CAP_SETUID, CAP_SETGID and CAP_KILL, wipes the variables, serves mutual
// TLS from files only it may read, and still runs and contains jobs.
TEST_F(SandboxTest, TheWorkerDropsToItsUserAndKeepsNoPemInItsEnvironment) {
  test_support::TestPki pki;
  const test_support::Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  const std::string key = test_support::TestPki::ReadFile(worker.key);
  Daemon daemon(
      {"--worker-user", "10001", "--job-user", kJobUser, "--tls-ca-env",
       "CA_PEM", "--tls-cert-env", "CERT_PEM", "--tls-key-env", "KEY_PEM",
       "--idle-timeout-seconds", "1", "--idle-poll-interval-seconds", "0.5"},
      {"env", "CA_PEM=" + test_support::TestPki::ReadFile(pki.ca().cert),
       "CERT_PEM=" + test_support::TestPki::ReadFile(worker.cert),
       "KEY_PEM=" + key});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  EXPECT_EQ(ProcStatus(daemon.pid(), "Uid"), "10001\t10001\t10001\t10001");
  EXPECT_EQ(ProcStatus(daemon.pid(), "CapEff"), "00000000000000e0")
      << "CAP_KILL, CAP_SETGID and CAP_SETUID only";
  EXPECT_EQ(ProcStatus(daemon.pid(), "CapBnd"), "00000000000000e0");
  const std::string env =
      test_support::ProcFile(absl::StrCat("/proc/", daemon.pid(), "/environ"));
  EXPECT_EQ(env.find("PRIVATE KEY"), std::string::npos) << "the key was wiped";
  auto connection = WorkerConnection::Open(daemon.address(), pki.Mtls(worker));
  ASSERT_TRUE(connection.ok());
  std::smatch copy;
  const std::string log = daemon.log();
  ASSERT_TRUE(std::regex_search(
      log, copy,
      std::regex(R"(in memory only \(\S+ and /proc/self/fd/(\d+) of pid)")))
      << log;
  std::optional<JobOutcome> outcome;
  const std::string out =
      RunJob(**connection,
             {"sh", "-c",
              absl::StrCat("id -u; cat /proc/", daemon.pid(), "/fd/",
                           copy[1].str(), " 2>&1 | head -c 200")},
             &outcome);
  EXPECT_THAT(out, ::testing::StartsWith("20000\n")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("PRIVATE KEY"))) << out;
  EXPECT_THAT(out, HasSubstr("Permission denied"))
      << "the memory file is there, out of reach";
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0))
      << "it still retires: " << daemon.log();
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: idle"));
}

// As PID 1 of its namespace (as in a container without an init), the
// worker's own environment is /proc/1/environ: no job may read it, nor
// trace or signal PID 1.
TEST_F(SandboxTest, AsPid1TheWorkerIsOutOfAJobsReach) {
  Daemon daemon({"--job-user", kJobUser, "--idle-timeout-seconds", "0"},
                {"unshare", "--pid", "--fork", "--mount-proc", "env",
                 "CFDB_TEST_SECRET=hunter2"});
  ASSERT_EQ(daemon.pid(), 1) << daemon.log();
  auto connection = Connect(daemon);
  const std::string out = RunJob(
      *connection,
      {"sh", "-c",
       "cat /proc/1/environ /proc/1/mem 2>/dev/null | tr '\\0' '\\n' | "
       "grep -c CFDB_TEST_SECRET; kill -0 1 2>/dev/null && echo signalled; "
       "grep NoNewPrivs /proc/self/status"});
  EXPECT_THAT(out, ::testing::StartsWith("0\n")) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("signalled")));
  EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_TRUE(connection->Stop(Duration::zero(), kTimeout).ok());
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
}

TEST_F(SandboxTest, WithoutAJobUserTheWorkerSaysJobsShareItsIdentity) {
  Daemon daemon(
      {"--idle-timeout-seconds", "1", "--idle-poll-interval-seconds", "0.2"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("jobs run as the worker's own user"));
  EXPECT_THAT(daemon.log(), HasSubstr("job containment:"));
  EXPECT_THAT(daemon.log(), HasSubstr(" (auto: ")) << "says why";
}

// A key others may read is named; a certificate or CA, which are public
// (0644 by docs/TLS.md's recipe), is not.
TEST_F(SandboxTest, AKeyFileOthersMayReadIsNamed) {
  test_support::TestPki pki;
  const test_support::Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  chmod(worker.key.c_str(), 0644);
  chmod(worker.cert.c_str(), 0644);
  chmod(pki.ca().cert.c_str(), 0644);
  Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert,
                 "--tls-key", worker.key, "--idle-timeout-seconds", "0",
                 "--max-lifetime-seconds", "0.5"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(
      daemon.log(),
      HasSubstr(worker.key + " is readable by group or others (mode 0644)"));
  EXPECT_THAT(daemon.log(),
              ::testing::Not(HasSubstr(worker.cert + " is readable")));
  EXPECT_THAT(daemon.log(),
              ::testing::Not(HasSubstr(pki.ca().cert + " is readable")));
}

// A credential file another user owns, or in a directory others may write,
// could be rewritten or replaced by them: both are named.
TEST_F(SandboxTest, ACredentialFileOthersMayReplaceIsNamed) {
  test_support::TestPki pki;
  const test_support::Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  ASSERT_EQ(chown(worker.key.c_str(), 12345, 12345), 0);
  const std::string dir = std::filesystem::path(worker.cert).parent_path();
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert,
                 "--tls-key", worker.key, "--idle-timeout-seconds", "0",
                 "--max-lifetime-seconds", "0.5"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  const std::string log = daemon.log();
  EXPECT_THAT(log, HasSubstr(worker.key +
                             " is owned by uid 12345, neither root nor the "
                             "worker (uid 0)"));
  EXPECT_THAT(log, HasSubstr(worker.cert + " is in " + dir + " (mode 0777"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(worker.cert + " is owned by")));
}

// LiveWith returns how many live processes have `marker` as an argument.
int LiveWith(const std::string& marker) {
  int n = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", error)) {
    const std::string text = test_support::ProcFile(entry.path() / "cmdline");
    if (text.find(marker) == std::string::npos) continue;
    const std::string stat = test_support::ProcFile(entry.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && stat.substr(close + 2, 1) != "Z") ++n;
  }
  return n;
}

enum class Escape { kJoinWorkerGroup, kOwnGroup, kSession, kDoubleFork };
enum class End { kExit, kClientCancel, kTimeLimit, kStop, kLifetime };
// kCgroupByVfork: cgroups, with a worker whose kernel refuses clone3
// (tests/support/no_clone3.py), so that its jobs start by vfork and a
// cgroup.procs write.
enum class Mode { kSubreaper, kCgroup, kCgroupAsWorkerUser, kCgroupByVfork };

// Whether this build's worker always takes the vfork way (a sanitizer
// build, or not x86-64).
constexpr bool kVforkBuild = !internal::kSpawnsWithClone3;

// The command that runs the worker under a seccomp filter answering clone3
// with ENOSYS.
std::vector<std::string> NoClone3() {
  return {"/usr/bin/python3", CFDB_NO_CLONE3};
}

// EscapeJob is a job that starts a `sleep MARKER` which escapes its job as
// `how`, says "escaped", and then exits (kExit) or waits to be ended.
std::vector<std::string> EscapeJob(Escape how, bool exit,
                                   const std::string& marker) {
  const char* move =
      how == Escape::kJoinWorkerGroup ? "os.setpgid(0, worker_group)"
      : how == Escape::kOwnGroup      ? "os.setpgid(0, 0)"
      : how == Escape::kSession       ? "os.setsid()"
                                : "os.fork() and os._exit(0); os.setsid()";
  return {"python3", "-c",
          absl::StrCat("import os, sys, time\n"
                       "worker_group = os.getpgid(os.getppid())\n"
                       "if os.fork() == 0:\n"
                       // A job is a session of its own, so joining the
                       // worker's group (another session) is refused now:
                       // the process then stays in the job's group.
                       "    try:\n"
                       "        ",
                       move,
                       "\n"
                       "    except PermissionError:\n"
                       "        pass\n"
                       "    os.execvp('sleep', ['sleep', '",
                       marker,
                       "'])\n"
                       "time.sleep(0.3)\n"
                       "print('escaped', flush=True)\n",
                       exit ? "sys.exit(0)\n" : "time.sleep(1000)\n")};
}

struct Row {
  Mode mode;
  Escape escape;
  End end;
};

std::string Name(const Row& row) {
  static const char* escapes[] = {"JoinWorkerGroup", "OwnGroup", "Session",
                                  "DoubleFork"};
  static const char* ends[] = {"Exit", "ClientCancel", "TimeLimit", "Stop",
                               "Lifetime"};
  return absl::StrCat(row.mode == Mode::kCgroup ? "Cgroup"
                      : row.mode == Mode::kCgroupAsWorkerUser
                          ? "CgroupAsWorkerUser"
                      : row.mode == Mode::kCgroupByVfork ? "CgroupByVfork"
                                                         : "Subreaper",
                      escapes[static_cast<int>(row.escape)], "Then",
                      ends[static_cast<int>(row.end)]);
}

class EscapeTest : public ::testing::TestWithParam<Row> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "jobs of another user need root";
  }
};

// {join the worker's group, a group of its own, a session of its own, a
// double fork + setsid} x {exits, client cancels, time limit, Stop(0),
// lifetime drain}: nothing of the job is left soon after its end, and
// a cancelled job's outcome says what was sent.
TEST_P(EscapeTest, NothingOfTheJobOutlivesIt) {
  const Row row = GetParam();
  static int counter = 0;
  const std::string marker = absl::StrCat("4242.", getpid(), ++counter);
  std::vector<std::string> args = {
      "--job-user",
      kJobUser,
      "--idle-timeout-seconds",
      "0",
      "--task-kill-grace-seconds",
      "1",
      "--job-containment",
      row.mode == Mode::kSubreaper ? "subreaper" : "cgroup"};
  if (row.mode == Mode::kCgroupAsWorkerUser) {
    args.insert(args.end(), {"--worker-user", "10001"});
  }
  if (row.end == End::kLifetime) {
    args.insert(args.end(), {"--max-lifetime-seconds", "3",
                             "--max-lifetime-grace-seconds", "1"});
  }
  const TimePoint started = Now();
  Daemon daemon(args, row.mode == Mode::kCgroupByVfork
                          ? NoClone3()
                          : std::vector<std::string>{});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  if (row.mode == Mode::kCgroupByVfork) {
    ASSERT_TRUE(daemon.WaitForLog("jobs start with vfork")) << daemon.log();
  }
  auto connection = Connect(daemon);
  JobRequest request =
      ExecRequest(EscapeJob(row.escape, row.end == End::kExit, marker));
  if (row.end == End::kTimeLimit) MutableExec(request).time_limit = seconds(2);
  absl::Notification escaped;
  absl::StatusOr<JobOutcome> outcome;
  std::thread client([&] {
    outcome = connection->Dispatch(
        request,
        {.on_output =
             [&](OutputStream, std::string_view d) {
               if (d.find("escaped") != d.npos && !escaped.HasBeenNotified())
                 escaped.Notify();
             }},
        row.end == End::kClientCancel ? seconds(2) : kTimeout);
  });
  ASSERT_TRUE(escaped.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << daemon.log();
  if (row.end == End::kStop) {
    EXPECT_TRUE(connection->Stop(Duration::zero(), kTimeout).ok());
  }
  client.join();
  const TimePoint ended = Now();
  EXPECT_TRUE(WaitFor([&] { return LiveWith(marker) == 0; }, seconds(10)))
      << LiveWith(marker) << " escaped processes still live, " << Name(row)
      << "\n"
      << daemon.log();
  switch (row.end) {
    case End::kExit:
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      EXPECT_EQ(*outcome, JobOutcome::Exited(0));
      break;
    case End::kClientCancel:
      EXPECT_EQ(outcome.status().code(), absl::StatusCode::kDeadlineExceeded)
          << outcome.status();
      break;
    case End::kTimeLimit:
    case End::kStop:
    case End::kLifetime:
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      EXPECT_EQ(outcome->kind, JobOutcome::Kind::kFailed);
      EXPECT_THAT(outcome->message, ::testing::ContainsRegex(
                                        "SIGTERM sent to [1-9][0-9]* process"));
      break;
  }
  if (row.end == End::kLifetime) {
    EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
    EXPECT_LT(ToSeconds(Now() - started),
              5 + 2 * test_support::kSanitizerSlowdown)
        << "lifetime 3 s + grace 1 s + kill grace 1 s, with the daemon's "
           "start and exit";
  } else if (row.end != End::kStop) {
    EXPECT_TRUE(connection->Stop(Duration::zero(), kTimeout).ok());
  }
  (void)ended;
}

std::vector<Row> Rows() {
  std::vector<Row> rows;
  for (Escape escape : {Escape::kJoinWorkerGroup, Escape::kOwnGroup,
                        Escape::kSession, Escape::kDoubleFork}) {
    for (End end : {End::kExit, End::kClientCancel, End::kTimeLimit, End::kStop,
                    End::kLifetime}) {
      rows.push_back({Mode::kSubreaper, escape, end});
    }
    // Under cgroups the kernel holds every descendant: the exit, the time
    // limit and Stop(0) show the ways of ending.
    rows.push_back({Mode::kCgroup, escape, End::kExit});
    rows.push_back({Mode::kCgroup, escape, End::kTimeLimit});
    rows.push_back({Mode::kCgroup, escape, End::kStop});
  }
  // A worker that dropped to its own user keeps its cgroup subtree.
  rows.push_back({Mode::kCgroupAsWorkerUser, Escape::kDoubleFork, End::kExit});
  rows.push_back({Mode::kCgroupAsWorkerUser, Escape::kSession, End::kStop});
  // The vfork fallback holds the job as well.
  rows.push_back({Mode::kCgroupByVfork, Escape::kDoubleFork, End::kExit});
  rows.push_back({Mode::kCgroupByVfork, Escape::kSession, End::kStop});
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Matrix, EscapeTest, ::testing::ValuesIn(Rows()),
                         [](const auto& p) { return Name(p.param); });

// A job's program is in its own cgroup from its start, whether the worker
// made it there with clone3 or (where clone3 is refused) it wrote itself
// into cgroup.procs; the fallback is said once, and only where taken.
TEST_F(SandboxTest, AJobStartsInItsCgroupWithClone3OrItsFallback) {
  for (const bool refused : {false, true}) {
    SCOPED_TRACE(refused ? "clone3 refused" : "clone3");
    Daemon daemon({"--job-user", kJobUser, "--idle-timeout-seconds", "0",
                   "--job-containment", "cgroup"},
                  refused ? NoClone3() : std::vector<std::string>{});
    ASSERT_GT(daemon.pid(), 0) << daemon.log();
    auto connection = Connect(daemon);
    for (int job = 0; job < 2; ++job) {
      EXPECT_THAT(RunJob(*connection, {"cat", "/proc/self/cgroup"}),
                  ::testing::ContainsRegex(absl::StrCat(
                      "0::/.*cfdb-jobs-[0-9]+-[0-9]+/job-", job, "\n")));
    }
    const std::string fallback = "jobs start with vfork";
    if (refused || kVforkBuild) {
      ASSERT_TRUE(daemon.WaitForLog(fallback)) << daemon.log();
    }
    const std::string log = daemon.log();
    if (refused || kVforkBuild) {
      EXPECT_THAT(log, HasSubstr(fallback + " and join their cgroup"));
      EXPECT_EQ(log.find(fallback), log.rfind(fallback)) << log;
      if (!kVforkBuild) {
        EXPECT_THAT(log, HasSubstr("Function not implemented")) << log;
      }
    } else {
      EXPECT_THAT(log, ::testing::Not(HasSubstr(fallback)));
    }
    EXPECT_TRUE(connection->Stop(Duration::zero(), kTimeout).ok());
  }
}

// A worker removes the cgroup subtrees that workers killed outright left
// beside its own: only empty ones of its kind that no live worker holds
// (flock), said once; and its own goes once it has exited (the job guard).
TEST_F(SandboxTest, LeftoverJobCgroupsAreRemovedOnlyWhenEmptyAndUnheld) {
  absl::StatusOr<std::string> parent = OwnCgroupDir();
  if (!parent.ok() || access(parent->c_str(), W_OK) != 0) {
    GTEST_SKIP() << "no writable cgroup v2 here";
  }
  while (parent->size() > 1 && parent->back() == '/') parent->pop_back();
  // The worker runs in a cgroup of this test's own, so that no other
  // test's worker (they run at once) looks at these leftovers; it goes,
  // with all in it, however the test ends.
  struct Home {
    std::string dir;
    std::thread leaving;
    ~Home() {
      KillCgroup(dir);
      if (leaving.joinable()) leaving.join();
    }
  } home{absl::StrCat(*parent, "/cfdb-test-", getpid())};
  ASSERT_EQ(mkdir(home.dir.c_str(), 0755), 0) << home.dir << ": " << errno;
  const std::string base = absl::StrCat(home.dir, "/cfdb-jobs-", getpid());
  const std::string empty = base + "-1", busy = base + "-2", held = base + "-3",
                    other = home.dir + "/cfdb-jobs-x";
  for (const std::string& dir : {empty, empty + "/worker", empty + "/job-0",
                                 busy, busy + "/job-0", held, other}) {
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir << ": " << errno;
  }
  // A process left in `busy`, and `held` locked as a live worker locks its.
  test_support::CollectingJob left(
      ExecRequest({"/bin/sh", "-c",
                   absl::StrCat("echo $$ > ", busy,
                                "/job-0/cgroup.procs; exec sleep 600")}));
  home.leaving = std::thread([&] { RunExec(left); });
  ASSERT_TRUE(WaitFor(
      [&] {
        std::ifstream events(busy + "/cgroup.events");
        std::string text((std::istreambuf_iterator<char>(events)), {});
        return text.find("populated 1") != std::string::npos;
      },
      seconds(10)));
  const int lock = open(held.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_EQ(flock(lock, LOCK_EX), 0);

  std::string own;
  {
    Daemon daemon(
        {"--idle-timeout-seconds", "0", "--job-containment", "cgroup"},
        {"/bin/sh", "-c",
         absl::StrCat("echo $$ > ", home.dir, "/cgroup.procs && exec \"$@\""),
         "sh"});
    ASSERT_GT(daemon.pid(), 0) << daemon.log();
    ASSERT_TRUE(daemon.WaitForLog("still hold processes")) << daemon.log();
    const std::string log = daemon.log();
    EXPECT_THAT(log, HasSubstr(absl::StrCat(
                         "removed 1 empty cgroup subtree(s) of workers gone "
                         "from ",
                         home.dir, ": cfdb-jobs-", getpid(), "-1\n")))
        << log;
    EXPECT_EQ(log.find("empty cgroup subtree"),
              log.rfind("empty cgroup subtree"))
        << "said once: " << log;
    EXPECT_FALSE(std::filesystem::exists(empty));
    for (const std::string& dir : {busy, held, other}) {
      EXPECT_TRUE(std::filesystem::exists(dir)) << dir;
    }
    std::smatch under;
    ASSERT_TRUE(std::regex_search(
        log, under, std::regex("a cgroup per job under ([^ ]+) ")))
        << log;
    own = under[1];
    EXPECT_TRUE(std::filesystem::exists(own + "/worker"));
    auto connection = Connect(daemon);
    EXPECT_EQ(RunJob(*connection, {"echo", "ran"}), "ran\n");
    EXPECT_TRUE(connection->Stop(Duration::zero(), kTimeout).ok());
    EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
  }
  EXPECT_TRUE(
      WaitFor([&] { return !std::filesystem::exists(own); }, seconds(10)))
      << own << " outlived its worker";
  close(lock);
}

// A first job leaves a process behind that would read the next job's
// environment and steal its stdin; the next job, from another client,
// runs clean: its output is exactly its own.
TEST_F(SandboxTest, ALeftoverCannotTouchTheNextJob) {
  for (Escape escape : {Escape::kJoinWorkerGroup, Escape::kOwnGroup,
                        Escape::kSession, Escape::kDoubleFork}) {
    Daemon daemon({"--job-user", kAttackerJobUser, "--idle-timeout-seconds",
                   "0", "--max-concurrent-tasks", "1", "--job-containment",
                   "subreaper"});
    ASSERT_GT(daemon.pid(), 0) << daemon.log();
    // Asked for, whatever cgroups the host has.
    EXPECT_THAT(daemon.log(),
                HasSubstr("job containment: subreaper (as asked)"));
    const std::string stolen = absl::StrCat("/tmp/cfdb-stolen-", getpid(), "-",
                                            static_cast<int>(escape));
    std::filesystem::remove(stolen);
    // The attacker: escapes, then for 5 s reads every environment and
    // stdin it can and writes into every stdout it can.
    const std::string spy = absl::StrCat(
        "import glob, os, time\n"
        "end = time.time() + 5\n"
        "while time.time() < end:\n"
        "    for p in glob.glob('/proc/[0-9]*'):\n"
        "        try:\n"
        "            e = open(p + '/environ', 'rb').read()\n"
        "            if b'SECRET=' in e: open('",
        stolen,
        "', 'ab').write(e)\n"
        "            os.write(os.open(p + '/fd/1', os.O_WRONLY), b'forged!')\n"
        "            os.read(os.open(p + '/fd/0', os.O_RDONLY | "
        "os.O_NONBLOCK), 100)\n"
        "        except Exception:\n"
        "            pass\n"
        "    time.sleep(0.01)\n");
    std::vector<std::string> first = EscapeJob(escape, true, "4243");
    // The escaped process runs the spy instead of sleeping.
    first[2].replace(
        first[2].find("os.execvp('sleep', ['sleep', '4243'])"),
        std::string("os.execvp('sleep', ['sleep', '4243'])").size(),
        absl::StrCat("exec(", "'''", spy, "'''", ")"));
    auto attacker = Connect(daemon);
    EXPECT_EQ(RunJob(*attacker, first), "escaped\n");
    auto victim = Connect(daemon);
    JobRequest request = ExecRequest(
        {"sh", "-c",
         "read line; sleep 0.5; echo \"got:$line\"; echo \"$SECRET\""});
    MutableExec(request).env["SECRET"] = "s3cr3t";
    MutableExec(request).stdin_data = "private\n";
    std::string out;
    absl::StatusOr<JobOutcome> outcome = victim->Dispatch(
        request,
        {.on_output = [&](OutputStream, std::string_view d) { out.append(d); }},
        kTimeout);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(*outcome, JobOutcome::Exited(0));
    EXPECT_EQ(out, "got:private\ns3cr3t\n")
        << "escape " << static_cast<int>(escape);
    EXPECT_FALSE(std::filesystem::exists(stolen)) << "the environment was read";
    EXPECT_TRUE(victim->Stop(Duration::zero(), kTimeout).ok());
    EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  }
}

// A job forking without end stops at its uid's process budget; another
// job (another uid) still starts, and SIGTERM still ends the worker.
TEST_F(SandboxTest, AForkLoopStarvesNeitherTheWorkerNorAnotherJob) {
  Daemon daemon({"--job-user", kJobUser, "--job-nproc", "40",
                 "--idle-timeout-seconds", "0", "--max-concurrent-tasks", "2",
                 "--task-kill-grace-seconds", "1"});
  ASSERT_GT(daemon.pid(), 0) << daemon.log();
  auto hog = Connect(daemon);
  absl::Notification limited;
  std::thread loop([&] {
    (void)hog->Dispatch(ExecRequest({"python3", "-c",
                                     "import os, time\n"
                                     "n = 0\n"
                                     "try:\n"
                                     "    while n < 10000:\n"
                                     "        if os.fork() == 0:\n"
                                     "            time.sleep(1000)\n"
                                     "        n += 1\n"
                                     "except OSError:\n"
                                     "    print('limited at', n, flush=True)\n"
                                     "time.sleep(1000)\n"}),
                        {.on_output =
                             [&](OutputStream, std::string_view d) {
                               if (d.find("limited") != d.npos)
                                 limited.Notify();
                             }},
                        kTimeout);
  });
  ASSERT_TRUE(limited.WaitForNotificationWithTimeout(absl::Seconds(30)));
  auto other = Connect(daemon);
  std::optional<JobOutcome> outcome;
  EXPECT_EQ(RunJob(*other, {"sh", "-c", "echo ok"}, &outcome), "ok\n");
  EXPECT_EQ(outcome, JobOutcome::Exited(0));
  const TimePoint signalled = Now();
  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_LT(ToSeconds(Now() - signalled), 1 + 5 + 2.0)
      << "kill grace + open calls + margin";
  loop.join();
}

}  // namespace
}  // namespace cfdb::worker

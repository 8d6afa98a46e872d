// Busy-aware Kubernetes scale-in on a real daemon, against a stand-in for
// the API server's pod endpoint (tests/serve/fake_kube_api.py) reached over
// HTTPS through libcurl, with a service account folder as a pod mounts it.
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/daemon.h"
#include "support/fake_api.h"
#include "support/go_file.h"
#include "support/test_job.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::Daemon;
using test_support::ExecRequest;
using ::testing::HasSubstr;
using ::testing::Not;

void WriteFile(const std::string& path, const std::string& text) {
  // Replaced in one rename, as the kubelet swaps a projected token.
  std::ofstream(path + ".new") << text;
  std::filesystem::rename(path + ".new", path);
}

// A pod's view of the cluster: a service account folder (token, ca.crt,
// namespace) and an API server that trusts its token.
class FakePod {
 public:
  // `rotate_on_401`: the token the API server writes into the token file
  // as it answers its first 401 ("": none).
  explicit FakePod(std::vector<std::string> api_args,
                   const std::string& rotate_on_401 = "")
      : server_(pki_.Leaf("kube-apiserver", {"IP:127.0.0.1"})),
        api_(CFDB_FAKE_KUBE_API, [&] {
          std::vector<std::string> args = {"--cert", server_.cert, "--key",
                                           server_.key};
          args.insert(args.end(), api_args.begin(), api_args.end());
          if (!rotate_on_401.empty()) {
            args.insert(args.end(),
                        {"--rotate-on-401",
                         absl::StrCat(dir(), "/token=", rotate_on_401)});
          }
          return args;
        }()) {
    std::filesystem::create_directory(dir());
    std::filesystem::copy_file(pki_.ca().cert, dir() + "/ca.crt");
    SetToken("token-1");
    WriteFile(dir() + "/namespace", "jobs\n");
  }
  std::string dir() const { return pki_.dir() + "/serviceaccount"; }
  void SetToken(const std::string& token) {
    WriteFile(dir() + "/token", token + "\n");
  }
  test_support::FakeApi& api() { return api_; }
  // Env is the environment Kubernetes gives the container (the namespace
  // comes from the service account's file).
  std::vector<std::string> Env() const {
    return {"/usr/bin/env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
            absl::StrCat("KUBERNETES_SERVICE_PORT=", api_.port()),
            "POD_NAME=worker-0"};
  }
  std::vector<std::string> Flags(const std::string& hold_seconds) const {
    return {"--idle-timeout-seconds",
            "0",
            "--k8s-deletion-cost",
            "--k8s-hold-seconds",
            hold_seconds,
            "--k8s-service-account-dir",
            dir()};
  }

 private:
  test_support::TestPki pki_;
  test_support::Pem server_;
  test_support::FakeApi api_;
};

void RunJob(const Daemon& daemon, std::vector<std::string> argv) {
  auto connection = *WorkerConnection::Open(daemon.address());
  EXPECT_TRUE(connection->Dispatch(ExecRequest(std::move(argv)), {}).ok());
}

void StopAndWait(Daemon& daemon) {
  auto connection = *WorkerConnection::Open(daemon.address());
  EXPECT_TRUE(connection->Stop(seconds(5), seconds(30)).ok());
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0)) << daemon.log();
}

const nlohmann::json kBusy = {
    {"metadata",
     {{"annotations",
       {{"controller.kubernetes.io/pod-deletion-cost", "1000000"},
        {"karpenter.sh/do-not-disrupt", "true"}}}}}};
const nlohmann::json kIdle = {
    {"metadata",
     {{"annotations",
       {{"controller.kubernetes.io/pod-deletion-cost", "0"},
        {"karpenter.sh/do-not-disrupt", nullptr}}}}}};

// 20 sequential short jobs, each within the hold of the one before: one
// patch marks the pod busy, one marks it idle once the hold is over, each a
// JSON merge patch of the pod's own annotations with the service account's
// token.
TEST(PodDeletionCostTest, TwentySequentialJobsMakeTwoPatches) {
  FakePod pod({"--tokens", "token-1"});
  Daemon daemon(pod.Flags("3"), pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = *WorkerConnection::Open(daemon.address());
  test_support::RunJobUntilArrival(*connection, pod.api(), 0);
  for (int i = 0; i < 19; ++i) RunJob(daemon, {"true"});
  ASSERT_TRUE(pod.api().WaitForRequests(2)) << daemon.log();
  StopAndWait(daemon);
  const std::vector<nlohmann::json> requests = pod.api().Requests();
  ASSERT_EQ(requests.size(), 2u) << daemon.log();
  for (const nlohmann::json& request : requests) {
    EXPECT_EQ(request["path"], "/api/v1/namespaces/jobs/pods/worker-0");
    EXPECT_EQ(request["content_type"], "application/merge-patch+json");
    EXPECT_EQ(request["status"], 200);
  }
  EXPECT_EQ(requests[0]["body"], kBusy);
  EXPECT_EQ(requests[1]["body"], kIdle);
  EXPECT_THAT(daemon.log(), HasSubstr("pod deletion cost: busy"));
  EXPECT_THAT(daemon.log(), HasSubstr("pod deletion cost: idle"));
}

// With --k8s-safe-to-evict the same two patches also tell the cluster
// autoscaler: not safe to evict while busy, safe when idle.
TEST(PodDeletionCostTest, SafeToEvictIsFalseWhileBusyAndTrueWhenIdle) {
  FakePod pod({"--tokens", "token-1"});
  std::vector<std::string> flags = pod.Flags("0");
  flags.push_back("--k8s-safe-to-evict");
  Daemon daemon(flags, pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = *WorkerConnection::Open(daemon.address());
  test_support::RunJobUntilArrival(*connection, pod.api(), 0);
  ASSERT_TRUE(pod.api().WaitForRequests(2)) << daemon.log();
  StopAndWait(daemon);
  const std::vector<nlohmann::json> requests = pod.api().Requests();
  ASSERT_EQ(requests.size(), 2u) << daemon.log();
  nlohmann::json busy = kBusy;
  nlohmann::json idle = kIdle;
  const std::string key = "cluster-autoscaler.kubernetes.io/safe-to-evict";
  busy["metadata"]["annotations"][key] = "false";
  idle["metadata"]["annotations"][key] = "true";
  EXPECT_EQ(requests[0]["body"], busy);
  EXPECT_EQ(requests[1]["body"], idle);
  EXPECT_THAT(daemon.log(), HasSubstr(key + " false"));
}

// The token is read for every call: one rotated between two calls is used.
TEST(PodDeletionCostTest, ARotatedTokenIsUsed) {
  FakePod pod({"--tokens", "token-1,token-2"});
  Daemon daemon(pod.Flags("0"), pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  const test_support::GoFile go;
  std::thread job([&] { RunJob(daemon, {"sh", "-c", go.WaitCommand()}); });
  ASSERT_TRUE(pod.api().WaitForRequests(1)) << daemon.log();
  pod.SetToken("token-2");
  go.Open();
  job.join();
  ASSERT_TRUE(pod.api().WaitForRequests(2)) << daemon.log();
  StopAndWait(daemon);
  std::vector<nlohmann::json> requests = pod.api().Requests();
  ASSERT_EQ(requests.size(), 2u) << daemon.log();
  EXPECT_EQ(requests[0]["body"], kBusy);
  EXPECT_EQ(requests[0]["token"], "token-1");
  EXPECT_EQ(requests[1]["body"], kIdle);
  EXPECT_EQ(requests[1]["token"], "token-2");
}

// A 401 reads the token again and retries at once, without counting as a
// failure: the API server takes only token-2, which it writes into the
// token file as it answers the first 401 (as the kubelet replaces an
// expired token), so only a client that reads the file again gets a 200.
TEST(PodDeletionCostTest, A401ReadsTheTokenAgainAndRetriesAtOnce) {
  FakePod pod({"--tokens", "token-2"}, "token-2");
  Daemon daemon(pod.Flags("0"), pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = *WorkerConnection::Open(daemon.address());
  test_support::RunJobUntilArrival(*connection, pod.api(), 0);
  ASSERT_TRUE(pod.api().WaitForRequests(3)) << daemon.log();
  StopAndWait(daemon);
  const std::vector<nlohmann::json> requests = pod.api().Requests();
  ASSERT_EQ(requests.size(), 3u) << daemon.log();
  EXPECT_EQ(requests[0]["token"], "token-1");
  EXPECT_EQ(requests[0]["status"], 401);
  EXPECT_EQ(requests[1]["token"], "token-2") << "not read again";
  EXPECT_EQ(requests[1]["status"], 200);
  EXPECT_EQ(requests[1]["body"], kBusy);
  EXPECT_EQ(requests[2]["body"], kIdle);
  EXPECT_THAT(daemon.log(), Not(HasSubstr("did not take")));
}

// 403 (the Role lacks patch) or 404 (no such pod): one warning, and no
// call after it, busy or not; the jobs run as ever.
TEST(PodDeletionCostTest, A403Or404TurnsItOffWithOneWarning) {
  for (const char* status : {"403", "404"}) {
    SCOPED_TRACE(status);
    FakePod pod({"--statuses", status});
    Daemon daemon(pod.Flags("0"), pod.Env());
    ASSERT_GT(daemon.port(), 0) << daemon.log();
    auto connection = *WorkerConnection::Open(daemon.address());
    test_support::RunJobUntilArrival(*connection, pod.api(), 0);
    ASSERT_TRUE(pod.api().WaitForRequests(1)) << daemon.log();
    ASSERT_TRUE(daemon.WaitForLog("turning it off")) << daemon.log();
    RunJob(daemon, {"true"});
    RunJob(daemon, {"true"});
    StopAndWait(daemon);
    EXPECT_EQ(pod.api().Requests().size(), 1u) << daemon.log();
    const std::string log = daemon.log();
    EXPECT_EQ(log.find("turning it off"), log.rfind("turning it off")) << log;
  }
}

// 5xx and 429 are retried after a backoff, with the state wanted at the
// time of the retry: the job ended during the first backoff, so the retries
// say idle; once one succeeds, nothing more is sent.
TEST(PodDeletionCostTest, A5xxOr429IsRetriedWithTheLatestState) {
  FakePod pod({"--statuses", "503,429,200"});
  Daemon daemon(pod.Flags("0"), pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto connection = *WorkerConnection::Open(daemon.address());
  test_support::RunJobUntilArrival(*connection, pod.api(), 0);
  ASSERT_TRUE(pod.api().WaitForRequests(3)) << daemon.log();
  StopAndWait(daemon);
  const std::vector<nlohmann::json> requests = pod.api().Requests();
  ASSERT_EQ(requests.size(), 3u) << daemon.log();
  EXPECT_EQ(requests[0]["body"], kBusy);
  EXPECT_EQ(requests[0]["status"], 503);
  EXPECT_EQ(requests[1]["body"], kIdle);
  EXPECT_EQ(requests[1]["status"], 429);
  EXPECT_EQ(requests[2]["body"], kIdle);
  EXPECT_EQ(requests[2]["status"], 200);
}

// An API server that hangs delays neither a job nor Idle; when it answers,
// the docket's state then (idle) is applied.
TEST(PodDeletionCostTest, AHangingApiServerDelaysNothing) {
  FakePod pod({"--hang-first", "4.5"});  // under the 5 s call timeout
  Daemon daemon(pod.Flags("0"), pod.Env());
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  const test_support::GoFile go;
  std::thread job([&] { RunJob(daemon, {"sh", "-c", go.WaitCommand()}); });
  ASSERT_TRUE(pod.api().WaitForArrival(0)) << daemon.log();
  const auto start = std::chrono::steady_clock::now();
  go.Open();
  job.join();
  auto connection = *WorkerConnection::Open(daemon.address());
  EXPECT_TRUE(connection->IdleTime(seconds(5)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(3))
      << "the 4.5 s hang held up the job or Idle";
  ASSERT_TRUE(pod.api().WaitForRequests(2)) << daemon.log();
  EXPECT_EQ(pod.api().Requests()[0]["body"], kBusy);
  EXPECT_EQ(pod.api().Requests()[1]["body"], kIdle);
}

// Asked for outside a pod, the worker refuses to start and says what is
// missing.
TEST(PodDeletionCostTest, OutsideAPodTheWorkerRefusesToStart) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string missing;
  };
  const std::string host = "KUBERNETES_SERVICE_HOST";
  for (const Case& c : {
           Case{{}, "KUBERNETES_SERVICE_HOST is not set"},
           Case{{{host, "127.0.0.1"}}, "POD_NAME is not set"},
           Case{{{host, "127.0.0.1"}, {"POD_NAME", "w"}},
                "nor /no/such/serviceaccount/namespace"},
           Case{{{host, "127.0.0.1"},
                 {"POD_NAME", "w"},
                 {"POD_NAMESPACE", "jobs"}},
                "cannot read /no/such/serviceaccount/token"},
       }) {
    test_support::CollectingJob serve(test_support::Command(
        {"serve", "--port", "0", "--k8s-deletion-cost",
         "--k8s-service-account-dir", "/no/such/serviceaccount"},
        c.env));
    EXPECT_EQ(RunExec(serve), JobOutcome::Exited(2)) << serve.err();
    EXPECT_THAT(serve.err(), HasSubstr("--k8s-deletion-cost"));
    EXPECT_THAT(serve.err(), HasSubstr(c.missing));
  }
}

// --k8s-safe-to-evict without --k8s-deletion-cost would do nothing: the
// worker refuses it and names it.
TEST(PodDeletionCostTest, SafeToEvictAloneIsRefused) {
  test_support::CollectingJob serve(test_support::Command(
      {"serve", "--port", "0", "--k8s-safe-to-evict"}, {}));
  EXPECT_EQ(RunExec(serve), JobOutcome::Exited(2)) << serve.err();
  EXPECT_THAT(serve.err(), HasSubstr("--k8s-safe-to-evict"));
  EXPECT_THAT(serve.err(), HasSubstr("needs --k8s-deletion-cost"));
}

}  // namespace
}  // namespace cfdb::worker

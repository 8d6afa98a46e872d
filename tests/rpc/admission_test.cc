// Who may call what (issue 13): per-method admission by the identity in the
// client's certificate, against a real server over real mutual TLS.
#include <filesystem>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/methods.h"
#include "rpc/san_match.h"
#include "spdlog/spdlog.h"
#include "support/feed.h"
#include "support/log_capture.h"
#include "support/loopback.h"
#include "support/test_job.h"
#include "support/test_pki.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::Pem;
using test_support::TestPki;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kWorker[] = "worker.cfdb.internal";
constexpr char kApi[] = "api.cfdb.internal";
constexpr auto kTimeout = seconds(10);

enum class Who { kApi, kWorker, kStranger };

// A cell of the admission matrix: a method of the one table (methods.h)
// called by one identity.
struct Cell {
  const Method* method;
  Who who;
};

std::string Name(Who w) {
  switch (w) {
    case Who::kApi:
      return "Api";
    case Who::kWorker:
      return "Worker";
    case Who::kStranger:
      return "Stranger";
  }
  return "";
}

// A server admitting the platform's API to control and the worker's own
// certificate to observe (the template's default lists), or `admit`.
class AdmissionServer {
 public:
  explicit AdmissionServer(AdmissionLists admit = {.control = {kApi},
                                                   .observe = {kWorker}})
      : worker_pem_(pki_.Leaf("worker",
                              {absl::StrCat("DNS:", kWorker), "IP:127.0.0.1"})),
        api_pem_(pki_.Leaf("api", {absl::StrCat("DNS:", kApi)})),
        stranger_pem_(pki_.Leaf("stranger", {"DNS:stranger.cfdb.internal"})) {
    worker_ =
        std::make_unique<Worker>(WorkerOptions{.max_concurrent_tasks = 2});
    EXPECT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    auto server =
        WorkerServer::Start(*worker_, {.address = "127.0.0.1:0",
                                       .credentials = pki_.Mtls(worker_pem_),
                                       .admit = std::move(admit)});
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<WorkerConnection> Connect(const Pem& pem) {
    auto connection =
        WorkerConnection::Open(test_support::LoopbackAddress(server_->port()),
                               pki_.Mtls(pem, kWorker));
    EXPECT_TRUE(connection.ok());
    return *std::move(connection);
  }
  std::unique_ptr<WorkerConnection> Connect(Who who) {
    return Connect(who == Who::kApi      ? api_pem_
                   : who == Who::kWorker ? worker_pem_
                                         : stranger_pem_);
  }

  // Call makes one call of `method` as `who`: its status. A job it would
  // run touches marker().
  absl::Status Call(const Method& method, Who who) {
    std::unique_ptr<WorkerConnection> c = Connect(who);
    const JobRequest touch = test_support::ExecRequest({"touch", marker()});
    if (method == Method(Rpc::kIdle)) return c->IdleTime(kTimeout).status();
    if (method == method::kHealthCheck) return c->Health(kTimeout).status();
    if (method == Method(Rpc::kDispatch)) {
      return c->Dispatch(touch, {}, kTimeout).status();
    }
    if (method == method::kDispatchStream) {
      test_support::Feed empty("");
      return c->DispatchStream(touch, empty.read_fd(), {}, kTimeout).status();
    }
    if (method == Method(Rpc::kStop))
      return c->Stop(seconds(0), kTimeout).status();
    if (method == Method(Rpc::kAttach)) {
      return c->Attach("no-such-job", {}, {}, kTimeout).status();
    }
    if (method == Method(Rpc::kListJobs)) return c->ListJobs(kTimeout).status();
    if (method == Method(Rpc::kCancel)) {
      return c->Cancel("no-such-job", seconds(0), kTimeout).status();
    }
    if (method == Method(Rpc::kStatus)) return c->GetStatus(kTimeout).status();
    return absl::UnimplementedError("not in the matrix");
  }

  std::string marker() const { return pki_.dir() + "/ran"; }
  TestPki& pki() { return pki_; }
  Worker& worker() { return *worker_; }

 private:
  TestPki pki_;
  Pem worker_pem_, api_pem_, stranger_pem_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
};

class AdmissionMatrixTest : public ::testing::TestWithParam<Cell> {};

// Every method of the table x {api (control), worker (observe), stranger}:
// a control identity may call every method, an observe one the observe
// methods only, a stranger none; a denied call runs nothing and names the
// method and the identity the worker saw. (Allowed calls of Attach and
// Cancel name a job that does not exist: NOT_FOUND, past admission.)
TEST_P(AdmissionMatrixTest, OnlyTheAllowedCellsGetPastAdmission) {
  const Cell cell = GetParam();
  const bool allowed =
      cell.who == Who::kApi || (cell.who == Who::kWorker &&
                                cell.method->group() == MethodGroup::kObserve);
  AdmissionServer server;
  const absl::Status status = server.Call(*cell.method, cell.who);
  if (allowed) {
    EXPECT_NE(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_TRUE(status.ok() || absl::IsNotFound(status)) << status;
    return;
  }
  ASSERT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, status),
            ErrorKind::kPermissionDenied);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr(std::string(cell.method->name)));
  EXPECT_THAT(message,
              HasSubstr(cell.who == Who::kWorker ? kWorker : "stranger"));
  EXPECT_THAT(message, Not(HasSubstr(kApi))) << "never the allow-list";
  EXPECT_FALSE(std::filesystem::exists(server.marker())) << "nothing ran";
  EXPECT_FALSE(server.worker().stopping()) << "a denied Stop stops nothing";
  EXPECT_TRUE(server.Call(method::kHealthCheck, Who::kApi).ok())
      << "the worker still serves";
}

// Cells are every method of the table a WorkerConnection calls (Health's
// Watch and Wool's methods have tests of their own), by every identity.
std::vector<Cell> Cells() {
  std::vector<Cell> cells;
  for (const Method& m : method::kAll) {
    if (m == method::kHealthWatch || m == method::kWoolIdle ||
        m == method::kWoolStop) {
      continue;
    }
    for (const Who who : {Who::kApi, Who::kWorker, Who::kStranger}) {
      cells.push_back({&m, who});
    }
  }
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Cells, AdmissionMatrixTest,
                         ::testing::ValuesIn(Cells()),
                         [](const ::testing::TestParamInfo<Cell>& param_info) {
                           std::string name(param_info.param.method->name);
                           std::erase(name, '/');
                           return name + "By" + Name(param_info.param.who);
                         });

// The legacy Common Name is no identity: a certificate whose CN is the
// API's but with no SAN is refused, and told why.
TEST(AdmissionTest, ACommonNameIsNoIdentity) {
  AdmissionServer server;
  const Pem cn_only =
      server.pki().Issue("cn-only", kApi, {}, &server.pki().ca(), 0, 3600);
  const absl::Status status =
      server.Connect(cn_only)
          ->Dispatch(test_support::ExecRequest({"true"}), {}, kTimeout)
          .status();
  ASSERT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("a certificate without a DNS or URI SAN"));
}

// A URI SAN (e.g. a SPIFFE id) is an identity too.
TEST(AdmissionTest, AUriSanIsAnIdentity) {
  TestPki pki;
  const Pem worker_pem = pki.Leaf("worker", {"IP:127.0.0.1"});
  const Pem api = pki.Leaf("api", {"URI:spiffe://cfdb/api"});
  Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
  auto server = WorkerServer::Start(
      worker, {.credentials = pki.Mtls(worker_pem),
               .admit = {.control = {"spiffe://cfdb/api"}}});
  ASSERT_TRUE(server.ok()) << server.status();
  auto connection = WorkerConnection::Open(
      test_support::LoopbackAddress((*server)->port()), pki.Mtls(api));
  ASSERT_TRUE(connection.ok());
  EXPECT_TRUE((*connection)->IdleTime(kTimeout).ok());
}

// A wildcard entry covers exactly one leftmost label of a DNS name (RFC
// 6125), never a URI, over real mutual TLS.
TEST(AdmissionTest, AWildcardEntryAdmitsOneLabelOfADnsName) {
  AdmissionServer server({.observe = {"*.ops.cfdb.internal"}});
  int n = 0;
  for (const auto& [san, admitted] : std::vector<std::pair<std::string, bool>>{
           {"DNS:a.ops.cfdb.internal", true},
           {"DNS:A.OPS.cfdb.internal", true},
           {"DNS:a.b.ops.cfdb.internal", false},
           {"DNS:ops.cfdb.internal", false},
           {"URI:spiffe://a.ops.cfdb.internal", false}}) {
    const Pem client = server.pki().Leaf(absl::StrCat("client", ++n), {san});
    const absl::Status status =
        server.Connect(client)->IdleTime(kTimeout).status();
    EXPECT_EQ(status.ok(), admitted) << san << ": " << status;
  }
}

TEST(AdmissionEntryTest, OnlyEntriesThatCanMatchPass) {
  for (const char* good : {"api.cfdb.internal", "*.ops.cfdb.internal",
                           "spiffe://cfdb/api", "worker"}) {
    EXPECT_EQ(AdmissionEntryProblem(good), "") << good;
  }
  for (const char* never :
       {"*", "*.", "a.*.cfdb.internal", "w*.cfdb.internal", "*.*.cfdb.internal",
        "spiffe://cfdb/*", "127.0.0.1", "::1"}) {
    EXPECT_NE(AdmissionEntryProblem(never), "") << never;
  }
}

TEST(AdmissionEntryTest, AWildcardMatchesDnsNamesOnly) {
  EXPECT_TRUE(AdmissionMatches("*.ops.example", "a.ops.example"));
  EXPECT_FALSE(AdmissionMatches("*.ops.example", "*.ops.example"))
      << "a wildcard identity is no name";
  EXPECT_FALSE(AdmissionMatches("*.ops.example", "spiffe://a.ops.example"));
  EXPECT_TRUE(AdmissionMatches("API.example", "api.example"))
      << "DNS names ignore case";
  EXPECT_TRUE(AdmissionMatches("spiffe://cfdb/api", "spiffe://cfdb/api"));
  EXPECT_FALSE(AdmissionMatches("spiffe://cfdb/API", "spiffe://cfdb/api"))
      << "URIs match exactly";
}

TEST(AdmissionTest, ListsWithoutMutualTlsAreRefused) {
  Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
  auto server = WorkerServer::Start(worker, {.admit = {.control = {kApi}}});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("mutual TLS"));
}

// A client retrying a denied call cannot flood the log: one line per
// identity per period (LogThrottle).
TEST(AdmissionTest, ADeniedIdentityIsLoggedOncePerPeriod) {
  std::string text;
  {
    test_support::LogCapture log;
    AdmissionServer server;
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(server.Call(Method(Rpc::kIdle), Who::kStranger).code(),
                absl::StatusCode::kPermissionDenied);
    }
    EXPECT_EQ(server.Call(Method(Rpc::kDispatch), Who::kWorker).code(),
              absl::StatusCode::kPermissionDenied);
    text = log.str();
  }
  size_t lines = 0;
  for (size_t at = 0; (at = text.find("permission denied", at)) != text.npos;
       ++at) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << text;
}

// Ownership (issue 35): under mutual TLS a job is its dispatcher's. Two
// control identities, an observer and an admin of the test PKI.
TEST(OwnershipTest, AJobIsItsIdentitysAndAnAdminsOnly) {
  AdmissionServer server({.control = {"a.cfdb.internal", "b.cfdb.internal"},
                          .observe = {kWorker},
                          .admin = {"admin.cfdb.internal"}});
  auto as = [&](const std::string& name) {
    return server.Connect(server.pki().Leaf(
        name, {absl::StrCat("DNS:", name, ".cfdb.internal")}));
  };
  const std::unique_ptr<WorkerConnection> a = as("a"), b = as("b"),
                                          admin = as("admin");
  JobRequest request =
      test_support::ExecRequest({"sh", "-c", "echo mine; sleep 30"});
  request.detach_grace = seconds(-1);
  ASSERT_TRUE(a->Submit(request, kTimeout).ok());

  // B: neither sees it nor touches it; only the counts of others' jobs.
  absl::StatusOr<JobsPage> page = b->ListJobsPage(0, "", kTimeout);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->jobs.empty());
  EXPECT_EQ(page->others_running, 1u);
  const auto denied = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kPermissionDenied &&
           absl::StrContains(s.message(), "belongs to another identity");
  };
  EXPECT_TRUE(denied(b->Attach(request.job_id, {}, {}, kTimeout).status()));
  EXPECT_TRUE(denied(b->Cancel(request.job_id, seconds(0), kTimeout).status()));
  JobRequest again = request;
  again.attach_if_exists = true;
  EXPECT_TRUE(denied(b->Dispatch(again, {}, kTimeout).status()));
  again.attach_if_exists = false;
  EXPECT_EQ(b->Dispatch(again, {}, kTimeout).status().code(),
            absl::StatusCode::kAlreadyExists)
      << "an id is unique per worker";
  // The observer (the worker's own identity) sees counts only.
  page = server.Connect(Who::kWorker)->ListJobsPage(0, "", kTimeout);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->jobs.empty());
  EXPECT_EQ(page->others_running, 1u);
  // Status names it to its owner and the admin only.
  const std::unique_ptr<WorkerConnection> observer =
      server.Connect(Who::kWorker);
  for (WorkerConnection* other : {b.get(), observer.get()}) {
    const absl::StatusOr<WorkerState> state = other->GetStatus(kTimeout);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->jobs_in_flight, 1u);
    EXPECT_TRUE(state->job_ids.empty());
    EXPECT_EQ(state->other_jobs_in_flight, 1u);
  }
  for (WorkerConnection* owner : {a.get(), admin.get()}) {
    const absl::StatusOr<WorkerState> state = owner->GetStatus(kTimeout);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->job_ids, std::vector<std::string>{request.job_id});
    EXPECT_EQ(state->other_jobs_in_flight, 0u);
  }

  // A and the admin see it whole; the admin may end it.
  for (WorkerConnection* owner : {a.get(), admin.get()}) {
    absl::StatusOr<std::vector<JobInfo>> jobs = owner->ListJobs(kTimeout);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->front().client, "a.cfdb.internal");
  }
  const absl::StatusOr<JobOutcome> cancelled =
      admin->Cancel(request.job_id, seconds(0), kTimeout);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->failure, JobOutcome::Failure::kCancelled);
  const absl::StatusOr<JobOutcome> read =
      a->Attach(request.job_id, {}, {}, kTimeout);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *cancelled) << "the owner reads its result";
}

}  // namespace
}  // namespace cfdb::worker

// Who may call what (issue 13): per-method admission by the identity in the
// client's certificate, against a real server over real mutual TLS.
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "support/test_job.h"
#include "support/test_pki.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Pem;
using testing::TestPki;

constexpr char kWorker[] = "worker.cfdb.internal";
constexpr char kApi[] = "api.cfdb.internal";
constexpr auto kTimeout = seconds(10);

enum class Method { kIdle, kHealth, kDispatch, kStop };
enum class Who { kApi, kWorker, kStranger };

struct Cell {
  Method method;
  Who who;
  bool allowed;
};

std::string Name(Method m) {
  switch (m) {
    case Method::kIdle:
      return "Idle";
    case Method::kHealth:
      return "Health";
    case Method::kDispatch:
      return "Dispatch";
    case Method::kStop:
      return "Stop";
  }
  return "";
}

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
// certificate to observe: the template's default lists.
class AdmissionServer {
 public:
  AdmissionServer()
      : worker_pem_(pki_.Leaf("worker",
                              {absl::StrCat("DNS:", kWorker), "IP:127.0.0.1"})),
        api_pem_(pki_.Leaf("api", {absl::StrCat("DNS:", kApi)})),
        stranger_pem_(pki_.Leaf("stranger", {"DNS:stranger.cfdb.internal"})) {
    worker_ =
        std::make_unique<Worker>(WorkerOptions{.max_concurrent_tasks = 2});
    EXPECT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    auto server = WorkerServer::Start(
        *worker_, {.address = "127.0.0.1:0",
                   .credentials = pki_.Mtls(worker_pem_),
                   .admit = {.control = {kApi}, .observe = {kWorker}}});
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<WorkerConnection> Connect(const Pem& pem) {
    auto connection = WorkerConnection::Open(
        absl::StrCat("127.0.0.1:", server_->port()), pki_.Mtls(pem, kWorker));
    EXPECT_TRUE(connection.ok());
    return *std::move(connection);
  }
  std::unique_ptr<WorkerConnection> Connect(Who who) {
    return Connect(who == Who::kApi      ? api_pem_
                   : who == Who::kWorker ? worker_pem_
                                         : stranger_pem_);
  }

  // Call makes one call of `method` as `who`: its status.
  absl::Status Call(Method method, Who who) {
    std::unique_ptr<WorkerConnection> c = Connect(who);
    switch (method) {
      case Method::kIdle:
        return c->IdleTime(kTimeout).status();
      case Method::kHealth:
        return c->Health(kTimeout).status();
      case Method::kDispatch:
        return c
            ->Dispatch(testing::ExecRequest({"touch", marker()}), {}, kTimeout)
            .status();
      case Method::kStop:
        return c->Stop(seconds(0), kTimeout).status();
    }
    return absl::UnknownError("no such method");
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

// {Idle, health, Dispatch, Stop} x {api, worker, stranger}: exactly the
// allowed cells succeed; a denied call runs nothing and names the method
// and the identity the worker saw.
TEST_P(AdmissionMatrixTest, OnlyTheAllowedCellsSucceed) {
  const Cell cell = GetParam();
  AdmissionServer server;
  const absl::Status status = server.Call(cell.method, cell.who);
  if (cell.allowed) {
    EXPECT_TRUE(status.ok()) << status;
    return;
  }
  ASSERT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_EQ(ClassifyError(Rpc::kDispatch, status),
            ErrorKind::kPermissionDenied);
  const std::string message(status.message());
  EXPECT_THAT(message,
              HasSubstr(cell.method == Method::kHealth ? "Health/Check"
                                                       : Name(cell.method)));
  EXPECT_THAT(message,
              HasSubstr(cell.who == Who::kWorker ? kWorker : "stranger"));
  EXPECT_THAT(message, Not(HasSubstr(kApi))) << "never the allow-list";
  EXPECT_FALSE(std::filesystem::exists(server.marker())) << "nothing ran";
  EXPECT_FALSE(server.worker().stopping()) << "a denied Stop stops nothing";
  EXPECT_TRUE(server.Call(Method::kHealth, Who::kApi).ok())
      << "the worker still serves";
}

INSTANTIATE_TEST_SUITE_P(
    Cells, AdmissionMatrixTest,
    ::testing::Values(Cell{Method::kIdle, Who::kApi, true},
                      Cell{Method::kIdle, Who::kWorker, true},
                      Cell{Method::kIdle, Who::kStranger, false},
                      Cell{Method::kHealth, Who::kApi, true},
                      Cell{Method::kHealth, Who::kWorker, true},
                      Cell{Method::kHealth, Who::kStranger, false},
                      Cell{Method::kDispatch, Who::kApi, true},
                      Cell{Method::kDispatch, Who::kWorker, false},
                      Cell{Method::kDispatch, Who::kStranger, false},
                      Cell{Method::kStop, Who::kApi, true},
                      Cell{Method::kStop, Who::kWorker, false},
                      Cell{Method::kStop, Who::kStranger, false}),
    [](const ::testing::TestParamInfo<Cell>& param_info) {
      return Name(param_info.param.method) + "By" + Name(param_info.param.who);
    });

// The legacy Common Name is no identity: a certificate whose CN is the
// API's but with no SAN is refused, and told why.
TEST(AdmissionTest, ACommonNameIsNoIdentity) {
  AdmissionServer server;
  const Pem cn_only =
      server.pki().Issue("cn-only", kApi, {}, &server.pki().ca(), 0, 3600);
  const absl::Status status =
      server.Connect(cn_only)
          ->Dispatch(testing::ExecRequest({"true"}), {}, kTimeout)
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
      absl::StrCat("127.0.0.1:", (*server)->port()), pki.Mtls(api));
  ASSERT_TRUE(connection.ok());
  EXPECT_TRUE((*connection)->IdleTime(kTimeout).ok());
}

TEST(AdmissionTest, ListsWithoutMutualTlsAreRefused) {
  Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
  auto server = WorkerServer::Start(worker, {.admit = {.control = {kApi}}});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("mutual TLS"));
}

// A client retrying a denied call cannot flood the log: one line per
// identity per minute.
TEST(AdmissionTest, ADeniedIdentityIsLoggedOncePerMinute) {
  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>(
      "admission", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    AdmissionServer server;
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(server.Call(Method::kIdle, Who::kStranger).code(),
                absl::StatusCode::kPermissionDenied);
    }
    EXPECT_EQ(server.Call(Method::kDispatch, Who::kWorker).code(),
              absl::StatusCode::kPermissionDenied);
  }
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  size_t lines = 0;
  for (size_t at = 0; (at = text.find("permission denied", at)) != text.npos;
       ++at) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << text;
}

}  // namespace
}  // namespace cfdb::worker

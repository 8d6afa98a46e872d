// Mutual TLS against real workers, with a throw-away CA (test_pki.h).
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rpc/wire.h"
#include "support/daemon.h"
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

constexpr char kIdentity[] = "worker.cfdb.internal";
constexpr auto kTimeout = seconds(10);

class TlsTest : public ::testing::Test {
 protected:
  TlsTest()
      : worker_pem_(pki_.Leaf(
            "worker", {std::string("DNS:") + kIdentity, "IP:127.0.0.1"})),
        client_pem_(pki_.Leaf("client", {"DNS:client.cfdb.internal"})) {}

  void SetUp() override { StartServer(pki_.Mtls(worker_pem_)); }

  void StartServer(const Credentials& credentials) {
    worker_ =
        std::make_unique<Worker>(WorkerOptions{.max_concurrent_tasks = 2});
    ASSERT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    auto server = WorkerServer::Start(
        *worker_, {.address = "127.0.0.1:0", .credentials = credentials});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = test_support::LoopbackAddress(server_->port());
  }

  std::unique_ptr<WorkerConnection> Connect(const Credentials& credentials) {
    auto connection = WorkerConnection::Open(address_, credentials);
    EXPECT_TRUE(connection.ok());
    return *std::move(connection);
  }

  // MarkerJob would create a file if it ran.
  JobRequest MarkerJob() {
    JobRequest request = test_support::ExecRequest({"touch", marker_});
    return request;
  }
  bool MarkerExists() const { return std::filesystem::exists(marker_); }

  TestPki pki_;
  Pem worker_pem_;
  Pem client_pem_;
  std::string marker_ = pki_.dir() + "/ran";
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
  std::string address_;
};

TEST_F(TlsTest, MutualTlsClientCanIdleDispatchAndStop) {
  auto connection = Connect(pki_.Mtls(client_pem_, kIdentity));
  absl::StatusOr<double> idle = connection->IdleTime(kTimeout);
  ASSERT_TRUE(idle.ok()) << idle.status();
  absl::StatusOr<JobOutcome> outcome = connection->Dispatch(MarkerJob(), {});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(MarkerExists());
  absl::StatusOr<StopSummary> stopped = connection->Stop(seconds(1), kTimeout);
  EXPECT_TRUE(stopped.ok()) << stopped.status();
}

TEST_F(TlsTest, VerifyingAgainstTheDialledLoopbackAddressWorksWithItsSan) {
  auto connection = Connect(pki_.Mtls(client_pem_));
  EXPECT_TRUE(connection->IdleTime(kTimeout).ok());
}

TEST_F(TlsTest, ClientWithoutACertificateIsRefused) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = TestPki::ReadFile(pki_.ca().cert);
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(kIdentity);
  auto channel =
      grpc::CreateCustomChannel(address_, grpc::SslCredentials(options), args);
  auto stub = v1::Worker::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTimeout);
  v1::DispatchRequest request = wire::ToProto(MarkerJob());
  auto reader = stub->Dispatch(&context, request);
  v1::DispatchEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_FALSE(MarkerExists()) << "nothing ran";
}

TEST_F(TlsTest, ClientFromAnotherCaIsRefused) {
  const Pem stranger = pki_.Issue("stranger", "stranger", {"DNS:stranger"},
                                  &pki_.other_ca(), 0, 3600);
  auto connection = Connect(pki_.Mtls(stranger, kIdentity));
  EXPECT_FALSE(connection->IdleTime(kTimeout).ok());
  EXPECT_FALSE(connection->Dispatch(MarkerJob(), {}).ok());
  EXPECT_FALSE(MarkerExists()) << "nothing ran";
}

TEST_F(TlsTest, ExpiredClientCertificateIsRefused) {
  const Pem expired = pki_.Issue("expired", "expired", {"DNS:expired"},
                                 &pki_.ca(), -7200, -3600);
  auto connection = Connect(pki_.Mtls(expired, kIdentity));
  EXPECT_FALSE(connection->IdleTime(kTimeout).ok());
  EXPECT_FALSE(connection->Dispatch(MarkerJob(), {}).ok());
  EXPECT_FALSE(MarkerExists()) << "nothing ran";
}

// Revocation: a client certificate in the CRL directory is refused, the
// others are not.
TEST_F(TlsTest, ARevokedClientIsRefused) {
  const Pem revoked = pki_.Leaf("revoked", {"DNS:revoked.cfdb.internal"});
  Credentials served = pki_.Mtls(worker_pem_);
  served.crl_directory = pki_.Revoke({&revoked});
  server_.reset();
  StartServer(served);
  EXPECT_FALSE(Connect(pki_.Mtls(revoked, kIdentity))->IdleTime(kTimeout).ok());
  EXPECT_FALSE(
      Connect(pki_.Mtls(revoked, kIdentity))->Dispatch(MarkerJob(), {}).ok());
  EXPECT_FALSE(MarkerExists()) << "nothing ran";
  EXPECT_TRUE(
      Connect(pki_.Mtls(client_pem_, kIdentity))->IdleTime(kTimeout).ok());
}

TEST_F(TlsTest, ExpectingAnotherIdentityFailsAsAHandshakeError) {
  auto connection = Connect(pki_.Mtls(client_pem_, "other.cfdb.internal"));
  absl::StatusOr<double> idle = connection->IdleTime(kTimeout);
  ASSERT_FALSE(idle.ok());
  EXPECT_EQ(ClassifyError(Rpc::kIdle, idle.status()),
            ErrorKind::kHandshakeError)
      << idle.status();
}

TEST_F(TlsTest, RotatedServerCertificateIsServedWithoutARestart) {
  server_.reset();
  StartServer(pki_.Mtls(worker_pem_, "", seconds(1)));
  const Pem next = pki_.Leaf("worker-next",
                             {std::string("DNS:") + kIdentity, "IP:127.0.0.1"});
  // Replace atomically: write beside, then rename over.
  std::filesystem::rename(next.key, worker_pem_.key);
  std::filesystem::rename(next.cert, worker_pem_.cert);
  const std::string wanted = TestPki::ReadFile(worker_pem_.cert);

  const Credentials client = pki_.Mtls(client_pem_, kIdentity);
  const TimePoint give_up = std::chrono::steady_clock::now() + seconds(30);
  std::string served;
  while (served != wanted && std::chrono::steady_clock::now() < give_up) {
    // A new channel each time, so each call makes a new handshake.
    grpc::ChannelArguments args;
    args.SetInt(
        "cfdb.test.fresh",
        static_cast<int>(
            std::chrono::steady_clock::now().time_since_epoch().count() &
            0x7fffffff));
    wire::SetChannelArguments(client, args);
    auto stub = v1::Worker::NewStub(grpc::CreateCustomChannel(
        address_, wire::ChannelCredentials(client), args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kTimeout);
    v1::IdleTime reply;
    if (!stub->Idle(&context, v1::IdleRequest(), &reply).ok()) continue;
    for (const auto& pem :
         context.auth_context()->FindPropertyValues("x509_pem_cert")) {
      served.assign(pem.data(), pem.size());
    }
  }
  EXPECT_EQ(served, wanted);
}

TEST(TlsDaemonTest, ReapsItselfUnderMutualTlsThroughItsSelfPoll) {
  TestPki pki;
  const Pem worker =
      pki.Leaf("worker", {std::string("DNS:") + kIdentity, "IP:127.0.0.1"});
  test_support::Daemon daemon(
      {"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert, "--tls-key",
       worker.key, "--tls-identity", kIdentity, "--idle-timeout-seconds", "1",
       "--idle-poll-interval-seconds", "0.2"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: idle for"));
}

// A setting under which the worker's own self-poll could never succeed,
// so that it could never retire on idle: `args` after the CA, and what the
// refusal must say (naming the setting).
struct Unpollable {
  const char* name;
  std::function<std::vector<std::string>(TestPki& pki)> args;
  std::vector<std::string> says;
};

void PrintTo(const Unpollable& row, std::ostream* os) { *os << row.name; }

class UnpollableTest : public ::testing::TestWithParam<Unpollable> {};

// Refused at start, before listening: exit 2, naming the setting.
TEST_P(UnpollableTest, IsRefusedAtStartNamingTheSetting) {
  TestPki pki;
  std::vector<std::string> args = {"serve", "--port", "0", "--tls-ca",
                                   pki.ca().cert};
  for (const std::string& arg : GetParam().args(pki)) args.push_back(arg);
  test_support::CollectingJob job(test_support::Command(args));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(2)) << job.err();
  for (const std::string& part : GetParam().says) {
    EXPECT_THAT(job.err(), HasSubstr(part));
  }
  EXPECT_THAT(job.err(), Not(HasSubstr("listening on")));
}

std::vector<std::string> Serving(const Pem& pem) {
  return {"--tls-cert", pem.cert, "--tls-key", pem.key};
}

// WorkerWith serves a certificate the self-poll can succeed with, and
// `more` settings.
std::function<std::vector<std::string>(TestPki&)> WorkerWith(
    std::vector<std::string> more) {
  return [more](TestPki& pki) {
    std::vector<std::string> args = Serving(
        pki.Leaf("worker", {"DNS:worker.cfdb.internal", "IP:127.0.0.1"}));
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
}

// UsageOnly serves a certificate with the extendedKeyUsage `eku` alone.
std::function<std::vector<std::string>(TestPki&)> UsageOnly(std::string eku) {
  return [eku](TestPki& pki) {
    return Serving(pki.Issue(eku, "worker", {"IP:127.0.0.1"}, &pki.ca(), 0,
                             3600, false, eku));
  };
}

INSTANTIATE_TEST_SUITE_P(
    Settings, UnpollableTest,
    ::testing::Values(
        Unpollable{"CommonNameOnly",
                   [](TestPki& pki) {
                     return Serving(pki.Issue("cn-only", "127.0.0.1", {},
                                              &pki.ca(), 0, 3600));
                   },
                   {"--tls-cert: /tmp/cfdb-pki-",
                    "/cn-only.pem: the worker's certificate has no SAN for "
                    "'127.0.0.1' (SANs: none; the Common Name is never used)"}},
        Unpollable{"IdentityNotInTheSan",
                   WorkerWith({"--tls-identity", "other.cfdb.internal"}),
                   {"--tls-identity 'other.cfdb.internal': the worker's "
                    "certificate has no SAN for 'other.cfdb.internal'"}},
        Unpollable{
            "NoLoopbackSanWithoutAnIdentity",
            [](TestPki& pki) {
              return Serving(pki.Leaf("worker", {"DNS:worker.cfdb.internal"}));
            },
            {"--tls-cert: /tmp/cfdb-pki-", "has no SAN for '127.0.0.1'"}},
        Unpollable{
            "WrongCa",
            [](TestPki& pki) {
              return Serving(pki.Issue("foreign", "foreign", {"IP:127.0.0.1"},
                                       &pki.other_ca(), 0, 3600));
            },
            {"--tls-cert: /tmp/cfdb-pki-", "does not verify against the CA"}},
        Unpollable{"MismatchedKey",
                   [](TestPki& pki) {
                     const Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
                     const Pem other = pki.Leaf("other", {"IP:127.0.0.1"});
                     return std::vector<std::string>{"--tls-cert", worker.cert,
                                                     "--tls-key", other.key};
                   },
                   {"--tls-key: /tmp/cfdb-pki-",
                    "does not belong to the certificate"}},
        Unpollable{"ServerUsageOnly",
                   UsageOnly("serverAuth"),
                   {"--tls-cert: /tmp/cfdb-pki-",
                    "cannot serve as a TLS client certificate"}},
        Unpollable{"ClientUsageOnly",
                   UsageOnly("clientAuth"),
                   {"--tls-cert: /tmp/cfdb-pki-",
                    "cannot serve as a TLS server certificate"}},
        Unpollable{
            "Revoked",
            [](TestPki& pki) {
              const Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
              std::vector<std::string> args = Serving(worker);
              args.insert(args.end(), {"--tls-crl-dir", pki.Revoke({&worker})});
              return args;
            },
            {"--tls-cert: /tmp/cfdb-pki-", "with the CRLs in /tmp/cfdb-pki-",
             "certificate revoked"}},
        Unpollable{"OwnIdentityNotAdmitted",
                   WorkerWith({"--tls-admit-control", "api.cfdb.internal"}),
                   {"--tls-admit-observe: admits none of the identities of "
                    "the worker's own certificate (worker.cfdb.internal)"}},
        Unpollable{"AWildcardInsideAName",
                   WorkerWith({"--tls-admit-observe",
                               "worker.cfdb.internal,w*.cfdb.internal"}),
                   {"--tls-admit-observe: 'worker.cfdb.internal,w*.cfdb."
                    "internal' holds 'w*.cfdb.internal', which has a '*' "
                    "other than as the whole leftmost label"}},
        Unpollable{"AWildcardInAUri",
                   WorkerWith({"--tls-admit-control", "spiffe://cfdb/*"}),
                   {"--tls-admit-control: 'spiffe://cfdb/*'",
                    "is a URI with a '*', and URIs match exactly"}},
        Unpollable{"AnIpAddress",
                   WorkerWith({"--tls-admit-observe", "127.0.0.1"}),
                   {"--tls-admit-observe: '127.0.0.1'",
                    "is an IP address, and admission matches DNS and URI "
                    "SANs only"}}),
    [](const auto& p) { return std::string(p.param.name); });

// A wildcard entry is honoured: the worker's own certificate, admitted to
// observe by "*.cfdb.internal", polls itself and retires on idle.
TEST(TlsDaemonTest, AWildcardAdmissionEntryAdmitsOneLabel) {
  TestPki pki;
  const Pem worker =
      pki.Leaf("worker", {std::string("DNS:") + kIdentity, "IP:127.0.0.1"});
  test_support::Daemon daemon(
      {"--tls-ca", pki.ca().cert, "--tls-cert", worker.cert, "--tls-key",
       worker.key, "--tls-admit-control", "api.cfdb.internal",
       "--tls-admit-observe", "*.cfdb.internal", "--idle-timeout-seconds", "1",
       "--idle-poll-interval-seconds", "0.2"});
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: idle for"));
}

TEST(TlsDaemonTest, MalformedFileIsRefusedWithTheFileAndReason) {
  TestPki pki;
  const Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  test_support::CollectingJob job(
      test_support::Command({"serve", "--tls-ca", worker.key, "--tls-cert",
                             worker.cert, "--tls-key", worker.key}));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(2));
  EXPECT_THAT(job.err(),
              HasSubstr("--tls-ca: " + worker.key + ": not a PEM certificate"));
}

// An encrypted key is a clear error at once, even with a terminal where
// OpenSSL would prompt for a pass phrase.
TEST(TlsDaemonTest, AnEncryptedKeyIsAnErrorNotAPrompt) {
  TestPki pki;
  const Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  const std::string encrypted = pki.dir() + "/encrypted.key";
  test_support::CollectingJob encrypt(test_support::ExecRequest(
      {"openssl", "pkey", "-in", worker.key, "-aes256", "-passout", "pass:x",
       "-out", encrypted}));
  ASSERT_EQ(RunExec(encrypt), JobOutcome::Exited(0)) << encrypt.err();
  // script(1) gives the worker a terminal on its stdin.
  JobRequest serve = test_support::ExecRequest(
      {"script", "-qec",
       absl::StrCat(test_support::Binary(), " serve --port 0 --tls-ca ",
                    pki.ca().cert, " --tls-cert ", worker.cert, " --tls-key ",
                    encrypted),
       "/dev/null"});
  MutableExec(serve).time_limit = seconds(20);
  test_support::CollectingJob job(serve);
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(2)) << job.out() << job.err();
  EXPECT_THAT(job.out() + job.err(), HasSubstr("is an encrypted key"));
}

// The template's default lists: the worker's own certificate observes (its
// self-poll and the health check work, and it retires itself when idle),
// and may not dispatch: exit 77, naming the method and the identity seen.
TEST(TlsDaemonTest, UnderTheDefaultListsTheWorkerObservesButDoesNotControl) {
  TestPki pki;
  const Pem worker =
      pki.Leaf("worker", {std::string("DNS:") + kIdentity, "IP:127.0.0.1"});
  const std::vector<std::string> tls = {
      "--tls-ca",  pki.ca().cert, "--tls-cert",     worker.cert,
      "--tls-key", worker.key,    "--tls-identity", kIdentity};
  std::vector<std::string> args = tls;
  args.insert(args.end(),
              {"--tls-admit-control", "api.cfdb.internal",
               "--tls-admit-observe", kIdentity, "--idle-timeout-seconds", "3",
               "--idle-poll-interval-seconds", "0.2"});
  test_support::Daemon daemon(args);
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  auto client = [&](std::vector<std::string> command) {
    command.insert(command.end(), tls.begin(), tls.end());
    command.insert(command.end(), {"--address", daemon.address()});
    return test_support::Command(command);
  };
  test_support::CollectingJob health(client({"health"}));
  EXPECT_EQ(RunExec(health), JobOutcome::Exited(0)) << health.err();
  JobRequest dispatch = client({"dispatch", "--no-stdin"});
  MutableExec(dispatch).argv.insert(MutableExec(dispatch).argv.end(),
                                    {"--", "true"});
  test_support::CollectingJob denied(dispatch);
  EXPECT_EQ(RunExec(denied), JobOutcome::Exited(77));
  EXPECT_THAT(denied.err(), HasSubstr("permission denied"));
  EXPECT_THAT(denied.err(), HasSubstr(std::string("Dispatch")));
  EXPECT_THAT(denied.err(), HasSubstr(kIdentity));
  EXPECT_EQ(daemon.Wait(), JobOutcome::Exited(0));
  EXPECT_THAT(daemon.log(), HasSubstr("exiting: idle for"));
  EXPECT_THAT(daemon.log(), Not(HasSubstr("no admission lists")));
}

// The ECS way: the PEMs in variables, for the worker and for the client
// commands its health check runs (which inherit the same variables). A
// client once aborted in gRPC here (a file watcher with no files).
TEST(TlsDaemonTest, ClientsTakeThePemsFromVariablesToo) {
  TestPki pki;
  const Pem worker =
      pki.Leaf("worker", {std::string("DNS:") + kIdentity, "IP:127.0.0.1"});
  const std::map<std::string, std::string> pems = {
      {"CFDB_WORKER_TLS_CA_PEM", TestPki::ReadFile(pki.ca().cert)},
      {"CFDB_WORKER_TLS_CERT_PEM", TestPki::ReadFile(worker.cert)},
      {"CFDB_WORKER_TLS_KEY_PEM", TestPki::ReadFile(worker.key)}};
  const std::vector<std::string> tls = {
      "--tls-ca-env",   "CFDB_WORKER_TLS_CA_PEM",
      "--tls-cert-env", "CFDB_WORKER_TLS_CERT_PEM",
      "--tls-key-env",  "CFDB_WORKER_TLS_KEY_PEM",
      "--tls-identity", kIdentity};
  test_support::Daemon daemon({"--tls-ca", pki.ca().cert, "--tls-cert",
                               worker.cert, "--tls-key", worker.key,
                               "--idle-timeout-seconds", "0"});
  ASSERT_GT(daemon.port(), 0) << daemon.log();
  for (const char* command : {"health", "idle"}) {
    std::vector<std::string> args = {command, "--address", daemon.address()};
    args.insert(args.end(), tls.begin(), tls.end());
    test_support::CollectingJob client(test_support::Command(args, pems));
    EXPECT_EQ(RunExec(client), JobOutcome::Exited(0))
        << command << ": " << client.err();
  }
}

TEST(TlsDaemonTest, KeyOfAnotherCertificateIsRefused) {
  TestPki pki;
  const Pem worker = pki.Leaf("worker", {"IP:127.0.0.1"});
  const Pem other = pki.Leaf("other", {"IP:127.0.0.1"});
  test_support::CollectingJob job(
      test_support::Command({"serve", "--tls-ca", pki.ca().cert, "--tls-cert",
                             worker.cert, "--tls-key", other.key}));
  EXPECT_EQ(RunExec(job), JobOutcome::Exited(2));
  EXPECT_THAT(job.err(), HasSubstr("does not belong to the certificate"));
}

}  // namespace
}  // namespace cfdb::worker

// Certificates that rotate without a failed handshake (CredentialMirror),
// and a server identity checked by SANs only (issue 13). The swaps run
// against the daemon, the way an operator rotates a worker's files.
#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Pem;
using testing::TestPki;

constexpr char kWorker[] = "worker.cfdb.internal";
// Only the certificate rotated in carries this name, so a call that
// expects it proves the new certificate is presented.
constexpr char kRotated[] = "rotated.cfdb.internal";

TlsSettings Settings(const std::string& ca, const std::string& cert,
                     const std::string& key) {
  TlsSettings s;
  s.ca = {ca, "--tls-ca"};
  s.cert = {cert, "--tls-cert"};
  s.key = {key, "--tls-key"};
  s.refresh_interval = seconds(1);
  return s;
}

// Replace puts a copy of `from` at `to` the way an operator replaces a
// file: written beside it (a new file, modified now), then renamed over.
void Replace(const std::string& from, const std::string& to) {
  fs::copy_file(from, to + ".tmp", fs::copy_options::overwrite_existing);
  fs::rename(to + ".tmp", to);
}

// Prober dials a new connection every 100 ms and calls Idle, counting
// failures, until stopped: what clients of a rotating worker see.
class Prober {
 public:
  Prober(std::string address, Credentials credentials)
      : thread_([this, address, credentials] {
          while (!stop_) {
            auto c = WorkerConnection::Open(address, credentials,
                                            {.own_connection = true});
            absl::StatusOr<double> idle = (*c)->IdleTime(seconds(2));
            ++calls_;
            if (!idle.ok()) {
              ++failures_;
              last_failure_ = idle.status().ToString();
            }
            std::this_thread::sleep_for(milliseconds(100));
          }
        }) {}
  ~Prober() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int calls() const { return calls_; }
  int failures() const { return failures_; }
  std::string last_failure() const { return last_failure_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> calls_{0}, failures_{0};
  std::string last_failure_;
  std::thread thread_;
};

class RotationTest : public ::testing::Test {
 protected:
  RotationTest()
      : old_(pki_.Leaf("old", {absl::StrCat("DNS:", kWorker), "IP:127.0.0.1"})),
        new_(
            pki_.Leaf("new", {absl::StrCat("DNS:", kWorker),
                              absl::StrCat("DNS:", kRotated), "IP:127.0.0.1"})),
        client_(pki_.Leaf("client", {"DNS:client.cfdb.internal"})),
        live_(pki_.dir() + "/live") {
    fs::create_directory(live_);
  }

  // Start serves with a mirror of `cert` and `key`.
  void Start(const std::string& cert, const std::string& key) {
    auto mirror = CredentialMirror::Start(Settings(pki_.ca().cert, cert, key),
                                          pki_.dir());
    ASSERT_TRUE(mirror.ok()) << mirror.status();
    mirror_ = *std::move(mirror);
    worker_ =
        std::make_unique<Worker>(WorkerOptions{.max_concurrent_tasks = 1});
    auto server =
        WorkerServer::Start(*worker_, {.credentials = mirror_->credentials()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  // Presents checks whether a new connection expecting `identity` works.
  bool Presents(const std::string& identity) {
    auto c = WorkerConnection::Open(address_, pki_.Mtls(client_, identity),
                                    {.own_connection = true});
    return (*c)->IdleTime(seconds(2)).ok();
  }

  // Serve runs the daemon on the files in live/, re-read every second,
  // polling itself every 100 ms.
  void Serve() {
    daemon_ = std::make_unique<testing::Daemon>(std::vector<std::string>{
        "--tls-ca", pki_.ca().cert, "--tls-cert", live_ + "/cert.pem",
        "--tls-key", live_ + "/key.pem", "--tls-refresh-interval-seconds", "1",
        "--idle-timeout-seconds", "600", "--idle-poll-interval-seconds", "0.1",
        "--log-level", "debug"});
    ASSERT_GT(daemon_->port(), 0) << daemon_->log();
    address_ = absl::StrCat("127.0.0.1:", daemon_->port());
    ASSERT_TRUE(daemon_->WaitForLog("idle poll: idle"));
  }

  // RotateWithoutAFailure runs `swap` while a client dials a new connection
  // every 100 ms, waits until the new certificate is presented, and
  // expects no failed call, of that client or of the daemon's self-poll.
  template <typename Swap>
  void RotateWithoutAFailure(Swap swap) {
    Serve();
    ASSERT_TRUE(Presents(kWorker));
    ASSERT_FALSE(Presents(kRotated)) << "the old certificate first";
    Prober client(address_, pki_.Mtls(client_, kWorker));
    std::this_thread::sleep_for(milliseconds(500));
    swap();
    EXPECT_TRUE(
        testing::WaitFor([&] { return Presents(kRotated); }, seconds(15)))
        << "new connections present the new certificate";
    // Probing on past one more refresh of the files.
    std::this_thread::sleep_for(milliseconds(1500));
    client.Stop();
    EXPECT_GT(client.calls(), 15);
    EXPECT_EQ(client.failures(), 0) << client.last_failure();
    EXPECT_THAT(daemon_->log(), Not(HasSubstr("idle poll failed")))
        << "the self-poll";
  }

  TestPki pki_;
  Pem old_, new_, client_;
  const std::string live_;
  std::unique_ptr<CredentialMirror> mirror_;
  std::unique_ptr<testing::Daemon> daemon_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
  std::string address_;
};

// The README's procedure with the files out of step for 1.5 s, in both
// orders: the worker keeps the last good pair meanwhile.
TEST_F(RotationTest, KeyThenCertificateFailsNoHandshake) {
  fs::copy_file(old_.cert, live_ + "/cert.pem");
  fs::copy_file(old_.key, live_ + "/key.pem");
  RotateWithoutAFailure([&] {
    Replace(new_.key, live_ + "/key.pem");
    std::this_thread::sleep_for(milliseconds(1500));
    Replace(new_.cert, live_ + "/cert.pem");
  });
}

TEST_F(RotationTest, CertificateThenKeyFailsNoHandshake) {
  fs::copy_file(old_.cert, live_ + "/cert.pem");
  fs::copy_file(old_.key, live_ + "/key.pem");
  RotateWithoutAFailure([&] {
    Replace(new_.cert, live_ + "/cert.pem");
    std::this_thread::sleep_for(milliseconds(1500));
    Replace(new_.key, live_ + "/key.pem");
  });
}

// The layout Kubernetes secret volumes use: the files are links into a
// directory that a `..data` link points at, swapped in one rename.
TEST_F(RotationTest, ASymlinkedDirectorySwapFailsNoHandshake) {
  fs::create_directory(live_ + "/..v1");
  fs::create_directory(live_ + "/..v2");
  fs::copy_file(old_.cert, live_ + "/..v1/cert.pem");
  fs::copy_file(old_.key, live_ + "/..v1/key.pem");
  fs::copy_file(new_.cert, live_ + "/..v2/cert.pem");
  fs::copy_file(new_.key, live_ + "/..v2/key.pem");
  fs::create_directory_symlink("..v1", live_ + "/..data");
  fs::create_symlink("..data/cert.pem", live_ + "/cert.pem");
  fs::create_symlink("..data/key.pem", live_ + "/key.pem");
  RotateWithoutAFailure([&] {
    fs::create_directory_symlink("..v2", live_ + "/..data.new");
    fs::rename(live_ + "/..data.new", live_ + "/..data");
  });
}

// Files out of step are named, and the last good set stays current.
TEST_F(RotationTest, OutOfStepFilesAreNamedAndTheLastGoodSetStays) {
  fs::copy_file(old_.cert, live_ + "/cert.pem");
  fs::copy_file(old_.key, live_ + "/key.pem");
  Start(live_ + "/cert.pem", live_ + "/key.pem");
  const std::string current =
      TestPki::ReadFile(mirror_->credentials().key_file);
  fs::rename(new_.key, live_ + "/key.pem");
  absl::StatusOr<bool> refreshed = mirror_->Refresh();
  ASSERT_FALSE(refreshed.ok());
  EXPECT_THAT(std::string(refreshed.status().message()),
              HasSubstr("does not belong to the certificate"));
  EXPECT_THAT(std::string(refreshed.status().message()),
              HasSubstr("changed since the last good set: --tls-key"));
  EXPECT_EQ(TestPki::ReadFile(mirror_->credentials().key_file), current);
  fs::rename(new_.cert, live_ + "/cert.pem");
  refreshed = mirror_->Refresh();
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  EXPECT_TRUE(*refreshed);
  EXPECT_NE(TestPki::ReadFile(mirror_->credentials().key_file), current);
  EXPECT_FALSE(*mirror_->Refresh()) << "nothing changed since";
}

// A certificate that does not chain to the CA is refused at start, and
// never replaces a good one.
TEST_F(RotationTest, ACertificateOfAnotherCaIsNeverInstalled) {
  const Pem foreign = pki_.Issue("foreign", "foreign", {"IP:127.0.0.1"},
                                 &pki_.other_ca(), 0, 3600);
  EXPECT_FALSE(CredentialMirror::Start(
                   Settings(pki_.ca().cert, foreign.cert, foreign.key))
                   .ok());
  fs::copy_file(old_.cert, live_ + "/cert.pem");
  fs::copy_file(old_.key, live_ + "/key.pem");
  Start(live_ + "/cert.pem", live_ + "/key.pem");
  fs::copy_file(foreign.cert, live_ + "/cert.pem",
                fs::copy_options::overwrite_existing);
  fs::copy_file(foreign.key, live_ + "/key.pem",
                fs::copy_options::overwrite_existing);
  absl::StatusOr<bool> refreshed = mirror_->Refresh();
  ASSERT_FALSE(refreshed.ok());
  EXPECT_THAT(std::string(refreshed.status().message()),
              HasSubstr("does not verify against the CA"));
  EXPECT_TRUE(Presents(kWorker));
}

// The mirror's files are the worker's alone, and go with it.
TEST_F(RotationTest, TheMirrorIsPrivateAndRemovedWithIt) {
  Start(old_.cert, old_.key);
  const std::string dir = mirror_->directory();
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all,
            fs::perms::owner_all);
  EXPECT_EQ(fs::status(mirror_->credentials().key_file).permissions() &
                fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  server_.reset();
  mirror_.reset();
  EXPECT_FALSE(fs::exists(dir));
}

// PEMs given inline (as from variables) are served from the mirror's
// files, which gRPC watches, not as data that would never rotate.
TEST_F(RotationTest, InlinePemsAreServedFromTheMirrorsFiles) {
  TlsSettings settings = Settings("", "", "");
  settings.ca = {"", "CFDB_WORKER_TLS_CA_PEM",
                 TestPki::ReadFile(pki_.ca().cert)};
  settings.cert = {"", "CFDB_WORKER_TLS_CERT_PEM",
                   TestPki::ReadFile(old_.cert)};
  settings.key = {"", "CFDB_WORKER_TLS_KEY_PEM", TestPki::ReadFile(old_.key)};
  auto mirror = CredentialMirror::Start(settings);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  const Credentials& served = (*mirror)->credentials();
  EXPECT_TRUE(served.key_pem.empty() && served.cert_pem.empty() &&
              served.ca_pem.empty());
  EXPECT_EQ(TestPki::ReadFile(served.key_file), TestPki::ReadFile(old_.key));
}

// A client accepts the worker by SANs only: a certificate whose Common
// Name is the expected identity but that has no SAN for it is refused.
TEST(SanOnlyTest, TheCommonNameNeverIdentifiesTheWorker) {
  TestPki pki;
  const Pem cn_only =
      pki.Issue("cn-only", kWorker, {"IP:127.0.0.1"}, &pki.ca(), 0, 3600);
  const Pem client = pki.Leaf("client", {"DNS:client.cfdb.internal"});
  Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
  auto server = WorkerServer::Start(worker, {.credentials = pki.Mtls(cn_only)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  auto by_name = WorkerConnection::Open(address, pki.Mtls(client, kWorker));
  absl::StatusOr<double> idle = (*by_name)->IdleTime(seconds(5));
  ASSERT_FALSE(idle.ok());
  EXPECT_EQ(ClassifyError(Rpc::kIdle, idle.status()),
            ErrorKind::kHandshakeError)
      << idle.status();
  auto by_address = WorkerConnection::Open(address, pki.Mtls(client));
  EXPECT_TRUE((*by_address)->IdleTime(seconds(5)).ok())
      << "its IP SAN still matches the dialled address";
}

// One label per wildcard, as RFC 6125 says.
TEST(SanOnlyTest, AWildcardCoversExactlyOneLabel) {
  TestPki pki;
  const Pem wildcard = pki.Leaf("wild", {"DNS:*.cfdb.internal"});
  const Pem client = pki.Leaf("client", {"DNS:client.cfdb.internal"});
  Worker worker(WorkerOptions{.max_concurrent_tasks = 1});
  auto server =
      WorkerServer::Start(worker, {.credentials = pki.Mtls(wildcard)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  for (const auto& [identity, ok] :
       std::vector<std::pair<std::string, bool>>{{"w1.cfdb.internal", true},
                                                 {"W1.CFDB.internal", true},
                                                 {"a.b.cfdb.internal", false},
                                                 {"cfdb.internal", false}}) {
    auto c = WorkerConnection::Open(address, pki.Mtls(client, identity),
                                    {.own_connection = true});
    EXPECT_EQ((*c)->IdleTime(seconds(5)).ok(), ok) << identity;
  }
}

}  // namespace
}  // namespace cfdb::worker

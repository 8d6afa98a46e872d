// Certificates that rotate without a failed handshake (CredentialMirror),
// and a server identity checked by SANs only (issue 13). The swaps run
// against the daemon, the way an operator rotates a worker's files.
#include <fcntl.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/daemon.h"
#include "support/loopback.h"
#include "support/proc_util.h"
#include "support/test_pki.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::Pem;
using test_support::TestPki;
using ::testing::HasSubstr;
using ::testing::Not;

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

// FailedSelfPolls are the log's lines of failed self-polls, but those past
// their deadline: a handshake a swap broke fails at once, while a poll's
// deadline (its interval: 0.5 s, 1.5 s under ASan) can pass on a loaded
// machine with nothing wrong.
std::string FailedSelfPolls(const std::string& log) {
  std::string failed;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, "idle poll failed") &&
        !absl::StrContains(line, "DEADLINE_EXCEEDED")) {
      absl::StrAppend(&failed, line, "\n");
    }
  }
  return failed;
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
            // A handshake the swap broke fails at once; a slow one on a
            // loaded machine is not what is probed.
            absl::StatusOr<double> idle =
                (*c)->IdleTime(seconds(5) * test_support::kSanitizerSlowdown);
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

// KeyCopies returns the files under /tmp but `pki` (where the test keeps
// its own) and the run's key log ($CFDB_TEST_KEY_LOG, which holds a line of
// every test key, and lies under /tmp when the build directory does),
// written since `since`, that hold a line of `key`'s PEM body: copies of a
// worker's key on disk.
std::vector<std::string> KeyCopies(const std::string& key,
                                   const std::string& pki,
                                   fs::file_time_type since) {
  std::vector<std::string> lines = absl::StrSplit(key, '\n');
  const std::string needle = lines.size() > 1 ? lines[1] : key;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no test thread sets variables
  const char* key_log = std::getenv("CFDB_TEST_KEY_LOG");
  std::vector<std::string> copies;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(
           "/tmp", fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->path() == pki) {
      it.disable_recursion_pending();
      continue;
    }
    std::error_code stat;
    if (key_log != nullptr && it->path() == key_log) continue;
    if (!it->is_regular_file(stat) || it->last_write_time(stat) < since ||
        it->file_size(stat) > (1 << 20)) {
      continue;
    }
    if (TestPki::ReadFile(it->path()).find(needle) != std::string::npos) {
      copies.push_back(it->path());
    }
  }
  return copies;
}

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
    auto mirror = CredentialMirror::Start(Settings(pki_.ca().cert, cert, key));
    ASSERT_TRUE(mirror.ok()) << mirror.status();
    mirror_ = *std::move(mirror);
    worker_ =
        std::make_unique<Worker>(WorkerOptions{.max_concurrent_tasks = 1});
    auto server =
        WorkerServer::Start(*worker_, {.credentials = mirror_->credentials()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    address_ = test_support::LoopbackAddress(server_->port());
  }

  // Presents checks whether a new connection expecting `identity` works.
  bool Presents(const std::string& identity) {
    auto c = WorkerConnection::Open(address_, pki_.Mtls(client_, identity),
                                    {.own_connection = true});
    return (*c)->IdleTime(seconds(2)).ok();
  }

  // ServeTheOldSet serves the old set from live/ (Serve) and returns when
  // it began, for KeyCopies.
  fs::file_time_type ServeTheOldSet() {
    const auto since = fs::file_time_type::clock::now();
    fs::copy_file(old_.cert, live_ + "/cert.pem");
    fs::copy_file(old_.key, live_ + "/key.pem");
    Serve();
    return since;
  }

  // Serve runs the daemon on the files in live/, re-read every second,
  // polling itself every 500 ms (stretched in a sanitizer build): a poll's
  // deadline is at most its interval, and a poll with its TLS handshake
  // was seen taking over 100 ms on a loaded machine, in the production
  // build at ctest -j6 as under ASan; a swap still meets 5 polls.
  void Serve() {
    daemon_ = std::make_unique<test_support::Daemon>(std::vector<std::string>{
        "--tls-ca", pki_.ca().cert, "--tls-cert", live_ + "/cert.pem",
        "--tls-key", live_ + "/key.pem", "--tls-refresh-interval-seconds", "1",
        "--idle-timeout-seconds", "600", "--idle-poll-interval-seconds",
        absl::StrCat(0.5 * test_support::kSanitizerSlowdown), "--log-level",
        "debug"});
    ASSERT_GT(daemon_->port(), 0) << daemon_->log();
    address_ = daemon_->address();
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
        test_support::WaitFor([&] { return Presents(kRotated); }, seconds(15)))
        << "new connections present the new certificate";
    // Probing on past one more refresh of the files, and until the client
    // has made more than 15 calls across the swap (each is a new handshake:
    // slower in a sanitizer build).
    std::this_thread::sleep_for(milliseconds(1500));
    EXPECT_TRUE(
        test_support::WaitFor([&] { return client.calls() > 15; }, seconds(15)))
        << client.calls() << " calls";
    client.Stop();
    EXPECT_EQ(client.failures(), 0) << client.last_failure();
    EXPECT_EQ(FailedSelfPolls(daemon_->log()), "") << "the self-poll";
  }

  TestPki pki_;
  Pem old_, new_, client_;
  const std::string live_;
  std::unique_ptr<CredentialMirror> mirror_;
  std::unique_ptr<test_support::Daemon> daemon_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
  std::string address_;
};

// ErrorLines counts the daemon's ERRORs about its TLS credentials.
int ErrorLines(const std::string& log) {
  int n = 0;
  for (size_t at = 0;
       (at = log.find(" error TLS credentials: ", at)) != std::string::npos;
       ++at) {
    ++n;
  }
  return n;
}

// Rotating to a set the worker's self-poll could not succeed with: the last
// good set stays, and each bad set is said once, as an ERROR.
TEST_F(RotationTest, ABadSetKeepsTheOldOneWithOneError) {
  ServeTheOldSet();
  const Pem cn_only =
      pki_.Issue("cn-only", "127.0.0.1", {}, &pki_.ca(), 0, 3600);
  const Pem no_loopback =
      pki_.Leaf("no-loopback", {absl::StrCat("DNS:", kWorker)});
  const Pem foreign = pki_.Issue("foreign", "foreign", {"IP:127.0.0.1"},
                                 &pki_.other_ca(), 0, 3600);
  const Pem other = pki_.Leaf("other", {"IP:127.0.0.1"});
  struct Bad {
    const char* name;
    std::string cert, key;
    const char* says;
  };
  int errors = 0;
  for (const Bad& bad :
       {Bad{"CN only", cn_only.cert, cn_only.key, "(SANs: none;"},
        Bad{"not the identity the self-poll verifies", no_loopback.cert,
            no_loopback.key, "no SAN for '127.0.0.1'"},
        Bad{"another CA", foreign.cert, foreign.key,
            "does not verify against the CA"},
        Bad{"a key of another certificate", old_.cert, other.key,
            "does not belong to the certificate"}}) {
    Replace(bad.cert, live_ + "/cert.pem");
    Replace(bad.key, live_ + "/key.pem");
    ASSERT_TRUE(test_support::WaitFor(
        [&] { return ErrorLines(daemon_->log()) > errors; }, seconds(15)))
        << bad.name;
    ++errors;
    const std::string log = daemon_->log();
    const std::string last = log.substr(log.rfind(" error TLS credentials: "));
    EXPECT_THAT(last.substr(0, last.find('\n')), HasSubstr(bad.says))
        << bad.name;
    EXPECT_TRUE(Presents(kWorker) && Presents(""))
        << bad.name << ": the old certificate is still presented";
  }
  // Two more reads of the last bad set: said once.
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_EQ(ErrorLines(daemon_->log()), errors);
  // A bad set served would fail the self-poll's handshakes (a poll past its
  // deadline on a loaded machine is another matter).
  EXPECT_THAT(daemon_->log(), Not(HasSubstr("handshake error")));
}

// ExpectNoKeyCopyAfterTheKill SIGKILLs the daemon and expects no copy of
// `keys` (paths of the originals) written to disk since `since`, a second
// later.
void ExpectNoKeyCopyAfterTheKill(test_support::Daemon& daemon,
                                 const TestPki& pki,
                                 const std::vector<std::string>& keys,
                                 fs::file_time_type since) {
  ASSERT_EQ(kill(daemon.pid(), SIGKILL), 0);
  EXPECT_EQ(daemon.Wait(), JobOutcome::Signaled(SIGKILL));
  std::this_thread::sleep_for(seconds(1));
  for (const std::string& key : keys) {
    EXPECT_THAT(KeyCopies(TestPki::ReadFile(key), pki.dir(), since),
                ::testing::IsEmpty());
  }
}

// The worker holds its key copy in memory only, so a SIGKILL leaves none
// on disk.
TEST_F(RotationTest, AKilledWorkerLeavesNoKeyCopy) {
  const auto since = ServeTheOldSet();
  std::string fds;
  for (const auto& fd :
       fs::directory_iterator(absl::StrCat("/proc/", daemon_->pid(), "/fd"))) {
    std::error_code ec;
    fds += fs::read_symlink(fd.path(), ec).string() + "\n";
  }
  EXPECT_THAT(fds, HasSubstr("/memfd:cfdb-worker-tls-key-and-cert"));
  ExpectNoKeyCopyAfterTheKill(*daemon_, pki_, {old_.key}, since);
}

// Nor does it when its job guard died first.
TEST_F(RotationTest, AWorkerKilledAfterItsGuardLeavesNoKeyCopy) {
  const auto since = ServeTheOldSet();
  std::optional<pid_t> guard;
  for (const pid_t child : test_support::Children(daemon_->pid())) {
    if (test_support::Comm(child) == "cfdb-job-guard") guard = child;
  }
  ASSERT_TRUE(guard.has_value());
  ASSERT_EQ(kill(*guard, SIGKILL), 0);
  ExpectNoKeyCopyAfterTheKill(*daemon_, pki_, {old_.key}, since);
}

// Nor when it is killed while a new set comes in.
TEST_F(RotationTest, AWorkerKilledDuringARotationLeavesNoKeyCopy) {
  const auto since = ServeTheOldSet();
  Replace(new_.key, live_ + "/key.pem");
  Replace(new_.cert, live_ + "/cert.pem");
  ASSERT_TRUE(daemon_->WaitForLog("a new set is current"));
  Replace(old_.key, live_ + "/key.pem");
  Replace(old_.cert, live_ + "/cert.pem");
  std::this_thread::sleep_for(milliseconds(990));  // at the next read
  ExpectNoKeyCopyAfterTheKill(*daemon_, pki_, {old_.key, new_.key}, since);
}

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

// The mirror is in memory only: its files are descriptors of this process
// (the key and its certificate in one), and nothing of it is on disk.
TEST_F(RotationTest, TheMirrorIsInMemoryOnly) {
  Start(old_.cert, old_.key);
  const Credentials& served = mirror_->credentials();
  EXPECT_THAT(served.key_file, ::testing::StartsWith("/proc/self/fd/"));
  EXPECT_EQ(served.cert_file, served.key_file);
  EXPECT_EQ(fs::read_symlink(served.key_file).string().rfind("/memfd:", 0), 0u)
      << fs::read_symlink(served.key_file);
  const std::string pair = TestPki::ReadFile(served.key_file);
  EXPECT_EQ(pair, TestPki::ReadFile(old_.key) + TestPki::ReadFile(old_.cert));
  EXPECT_EQ(TestPki::ReadFile(served.ca_file),
            TestPki::ReadFile(pki_.ca().cert));
  EXPECT_EQ(
      fcntl(std::stoi(served.key_file.substr(14)), F_GET_SEALS) & F_SEAL_WRITE,
      F_SEAL_WRITE)
      << "a set never changes once current";
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
  EXPECT_EQ(TestPki::ReadFile(served.key_file),
            TestPki::ReadFile(old_.key) + TestPki::ReadFile(old_.cert));
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
  const std::string address = test_support::LoopbackAddress((*server)->port());
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
  const std::string address = test_support::LoopbackAddress((*server)->port());
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

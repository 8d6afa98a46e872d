// CredentialMirror: a private copy of the TLS files, in memory only, that
// only ever changes to a consistent set (credentials.h says why).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/shutdown.h"
#include "core/errno_text.h"
#include "core/log.h"
#include "rpc/tls_files.h"

namespace cfdb::worker {
namespace {

// gRPC re-reads the mirror this often; the mirror only holds consistent
// sets, so a short interval costs nothing and rotation is seen at once.
constexpr unsigned kGrpcRefreshSeconds = 1;

// MemoryFile returns a new memory-backed file (memfd, close-on-exec)
// holding `text`, modified at `mtime` and sealed against any change.
absl::StatusOr<int> MemoryFile(const char* name, const std::string& text,
                               time_t mtime) {
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("memfd_create: ", ErrnoText(errno)));
  }
  bool ok =
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  // gRPC compares modification times (in seconds) before and after reading
  // the key and the certificate: each set's are later than the last's, so a
  // read that straddles a swap is retried.
  const timespec times[2] = {{mtime, 0}, {mtime, 0}};
  ok = ok && futimens(fd, times) == 0 &&
       fcntl(fd, F_ADD_SEALS,
             F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) == 0;
  if (!ok) {
    const std::string why = ErrnoText(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("cannot fill a memfd: ", why));
  }
  return fd;
}

// Joined is `a` then `b`, on a line of its own.
std::string Joined(const std::string& a, const std::string& b) {
  return a.empty() || a.back() == '\n' ? a + b : absl::StrCat(a, "\n", b);
}

std::string FdPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

}  // namespace

class CredentialMirror::Impl {
 public:
  Impl(TlsSettings settings, SelfPollCheck self)
      : settings_(std::move(settings)), self_(std::move(self)) {}

  ~Impl() {
    stop_.Stop();
    if (thread_.joinable()) thread_.join();
    for (const int fd : {ca_fd_, pair_fd_}) {
      if (fd >= 0) close(fd);
    }
  }

  // Install makes `pems` the current set: two new memory files (the CA;
  // the key followed by the certificate chain, so that gRPC, reading the
  // key and the certificate from one file, never sees them out of step),
  // put in place of the current ones with dup3(2), which swaps what a
  // descriptor number refers to in one step.
  absl::Status Install(const PemSet& pems) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mtime_ = std::max(mtime_ + 1, time(nullptr));
    absl::StatusOr<int> ca = MemoryFile("cfdb-worker-tls-ca", pems.ca, mtime_);
    if (!ca.ok()) return ca.status();
    absl::StatusOr<int> pair = MemoryFile("cfdb-worker-tls-key-and-cert",
                                          Joined(pems.key, pems.cert), mtime_);
    if (!pair.ok()) {
      close(*ca);
      return pair.status();
    }
    absl::Status swapped;
    for (const auto& [fresh, current] :
         {std::pair{*ca, &ca_fd_}, std::pair{*pair, &pair_fd_}}) {
      if (*current < 0) {
        *current = fresh;  // the first set: its numbers stay for good
        continue;
      }
      if (swapped.ok() && dup3(fresh, *current, O_CLOEXEC) < 0) {
        swapped = absl::InternalError(
            absl::StrCat("cannot swap in a new set: dup3: ", ErrnoText(errno)));
      }
      close(fresh);
    }
    // A failed swap (never seen) leaves the set as it was, or the CA alone
    // new, which gRPC reads apart from the pair anyway.
    if (swapped.ok()) current_ = pems;
    return swapped;
  }

  int ca_fd() const { return ca_fd_; }
  int pair_fd() const { return pair_fd_; }

  absl::StatusOr<bool> Refresh() {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<PemSet> pems = ReadPemSet(settings_);
    if (pems.ok() && *pems == current_) return false;
    absl::Status problem =
        pems.ok() ? CheckServingSet(settings_, *pems, self_) : pems.status();
    if (problem.ok()) problem = Install(*pems);
    if (!problem.ok()) {
      return absl::Status(problem.code(),
                          absl::StrCat(problem.message(), Changed(pems)));
    }
    return true;
  }

  void Watch() {
    thread_ = std::thread([this, watcher = stop_.watcher()] {
      Problems problems;
      while (watcher.WaitUntil(SteadyClock::Get().Now() +
                               settings_.refresh_interval)) {
        Report(Refresh(), problems);
      }
    });
  }

  absl::Status InstallFirst(const PemSet& pems) {
    absl::MutexLock lock(&mu_);
    return Install(pems);
  }

 private:
  // Changed names the files that differ from the current set, for a
  // problem's message: the ones that moved on while the others did not.
  std::string Changed(const absl::StatusOr<PemSet>& pems) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pems.ok()) return "";
    std::vector<std::string> changed;
    if (pems->ca != current_.ca) changed.push_back(settings_.ca.source);
    if (pems->cert != current_.cert) changed.push_back(settings_.cert.source);
    if (pems->key != current_.key) changed.push_back(settings_.key.source);
    return absl::StrCat(
        "; changed since the last good set: ", absl::StrJoin(changed, ", "),
        "; serving the last good set until a good one comes");
  }

  // Problems is what Report has seen of a run of bad reads.
  struct Problems {
    std::string seen;      // at the last read
    std::string reported;  // logged already
  };

  // Report logs a new set (info), and a problem once two reads in a row
  // found it (one ERROR until it changes): files replaced one by one are
  // out of step for a moment, which is no fault.
  static void Report(const absl::StatusOr<bool>& changed, Problems& problems) {
    if (changed.ok()) {
      if (*changed) {
        LogEvent(spdlog::level::info, "TLS credentials: a new set is current",
                 {{"tls_rotation", "installed"}});
      }
      problems = {};
      return;
    }
    const std::string problem(changed.status().message());
    if (problem == problems.reported) return;
    if (problem != problems.seen) {
      problems.seen = problem;
      spdlog::debug("TLS credentials: {}; reading again in a moment", problem);
      return;
    }
    problems.reported = problem;
    LogEvent(spdlog::level::err, absl::StrCat("TLS credentials: ", problem),
             {{"tls_rotation", "kept last good set"}});
  }

  const TlsSettings settings_;
  const SelfPollCheck self_;
  absl::Mutex mu_;
  PemSet current_ ABSL_GUARDED_BY(mu_);
  time_t mtime_ ABSL_GUARDED_BY(mu_) = 0;
  // The descriptors gRPC reads, by number, from the first set on.
  int ca_fd_ = -1;
  int pair_fd_ = -1;
  Shutdown stop_;
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<CredentialMirror>> CredentialMirror::Start(
    const TlsSettings& settings, const SelfPollCheck& self) {
  absl::StatusOr<Credentials> credentials = MakeCredentials(settings);
  if (!credentials.ok()) return credentials.status();
  if (credentials->kind != Credentials::Kind::kMutualTls) {
    return absl::InvalidArgumentError("a credential mirror needs mutual TLS");
  }
  absl::StatusOr<PemSet> pems = ReadPemSet(settings);
  if (!pems.ok()) return pems.status();
  if (absl::Status s = CheckServingSet(settings, *pems, self); !s.ok()) {
    return s;
  }
  auto impl = std::make_unique<Impl>(settings, self);
  if (absl::Status s = impl->InstallFirst(*pems); !s.ok()) return s;
  std::unique_ptr<CredentialMirror> mirror(
      new CredentialMirror(std::move(impl)));
  mirror->credentials_ = *credentials;
  mirror->credentials_.ca_file = FdPath(mirror->impl_->ca_fd());
  mirror->credentials_.cert_file = FdPath(mirror->impl_->pair_fd());
  mirror->credentials_.key_file = mirror->credentials_.cert_file;
  // The mirror's files, watched, rotate; inline PEMs would not.
  mirror->credentials_.ca_pem.clear();
  mirror->credentials_.cert_pem.clear();
  mirror->credentials_.key_pem.clear();
  mirror->credentials_.refresh_interval =
      std::chrono::seconds(kGrpcRefreshSeconds);
  return mirror;
}

CredentialMirror::CredentialMirror(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

CredentialMirror::~CredentialMirror() = default;

absl::StatusOr<bool> CredentialMirror::Refresh() { return impl_->Refresh(); }

void CredentialMirror::Watch() { impl_->Watch(); }

}  // namespace cfdb::worker

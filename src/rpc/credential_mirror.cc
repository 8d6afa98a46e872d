// CredentialMirror: a private copy of the TLS files that only ever changes
// to a consistent set (credentials.h says why).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
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

absl::Status WriteFile(const std::string& path, const std::string& text,
                       time_t mtime) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && write(fd, text.data(), text.size()) ==
                           static_cast<ssize_t>(text.size());
  // gRPC compares modification times (in seconds) before and after reading
  // the key and the certificate: each set's are later than the last's, so a
  // read that straddles a swap is retried.
  const timespec times[2] = {{mtime, 0}, {mtime, 0}};
  ok = ok && futimens(fd, times) == 0;
  const std::string why = ErrnoText(errno);
  if (fd >= 0) close(fd);
  if (!ok)
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", why));
  return absl::OkStatus();
}

}  // namespace

class CredentialMirror::Impl {
 public:
  Impl(TlsSettings settings, std::string directory)
      : settings_(std::move(settings)), directory_(std::move(directory)) {}

  ~Impl() {
    stop_.Stop();
    if (thread_.joinable()) thread_.join();
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  // Install writes `pems` as the next set and makes it current.
  absl::Status Install(const PemSet& pems) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int generation = generation_ + 1;
    const std::string dir = absl::StrCat(directory_, "/set-", generation);
    if (mkdir(dir.c_str(), 0700) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot make ", dir, ": ", ErrnoText(errno)));
    }
    mtime_ = std::max(mtime_ + 1, time(nullptr));
    for (const auto& [name, text] : {std::pair{"ca.pem", &pems.ca},
                                     {"cert.pem", &pems.cert},
                                     {"key.pem", &pems.key}}) {
      if (absl::Status s =
              WriteFile(absl::StrCat(dir, "/", name), *text, mtime_);
          !s.ok()) {
        return s;
      }
    }
    const std::string link = absl::StrCat(directory_, "/current");
    const std::string staged = absl::StrCat(link, ".new");
    unlink(staged.c_str());
    if (symlink(absl::StrCat("set-", generation).c_str(), staged.c_str()) !=
            0 ||
        rename(staged.c_str(), link.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot make ", link, " current: ", ErrnoText(errno)));
    }
    // The set before the last goes; the last may still be being read.
    std::error_code ignored;
    std::filesystem::remove_all(
        absl::StrCat(directory_, "/set-", generation - 1), ignored);
    generation_ = generation;
    current_ = pems;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Refresh() {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<PemSet> pems = ReadPemSet(settings_);
    if (pems.ok() && *pems == current_) return false;
    absl::Status problem =
        pems.ok() ? CheckPemSet(settings_, *pems) : pems.status();
    if (problem.ok()) problem = Install(*pems);
    if (!problem.ok()) {
      return absl::Status(problem.code(),
                          absl::StrCat(problem.message(), Changed(pems)));
    }
    return true;
  }

  void Watch() {
    thread_ = std::thread([this, watcher = stop_.watcher()] {
      std::string last_problem;
      while (watcher.WaitUntil(SteadyClock::Get().Now() +
                               settings_.refresh_interval)) {
        Report(Refresh(), last_problem);
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
        "; serving the last good set until the files match");
  }

  static void Report(const absl::StatusOr<bool>& changed,
                     std::string& last_problem) {
    if (changed.ok()) {
      if (*changed) {
        LogEvent(spdlog::level::info, "TLS credentials: a new set is current",
                 {{"tls_rotation", "installed"}});
      }
      last_problem.clear();
      return;
    }
    const std::string problem(changed.status().message());
    if (problem == last_problem) return;  // said once until it changes
    last_problem = problem;
    LogEvent(spdlog::level::warn, absl::StrCat("TLS credentials: ", problem),
             {{"tls_rotation", "kept last good set"}});
  }

  const TlsSettings settings_;
  const std::string directory_;
  absl::Mutex mu_;
  PemSet current_ ABSL_GUARDED_BY(mu_);
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  time_t mtime_ ABSL_GUARDED_BY(mu_) = 0;
  Shutdown stop_;
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<CredentialMirror>> CredentialMirror::Start(
    const TlsSettings& settings, const std::string& parent) {
  absl::StatusOr<Credentials> credentials = MakeCredentials(settings);
  if (!credentials.ok()) return credentials.status();
  if (credentials->kind != Credentials::Kind::kMutualTls) {
    return absl::InvalidArgumentError("a credential mirror needs mutual TLS");
  }
  absl::StatusOr<PemSet> pems = ReadPemSet(settings);
  if (!pems.ok()) return pems.status();
  std::string directory = parent + "/cfdb-worker-tls-XXXXXX";
  if (mkdtemp(directory.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a directory under ",
                                            parent, ": ", ErrnoText(errno)));
  }
  auto impl = std::make_unique<Impl>(settings, directory);
  if (absl::Status s = impl->InstallFirst(*pems); !s.ok()) return s;
  std::unique_ptr<CredentialMirror> mirror(
      new CredentialMirror(std::move(impl)));
  mirror->directory_ = directory;
  mirror->credentials_ = *credentials;
  mirror->credentials_.ca_file = directory + "/current/ca.pem";
  mirror->credentials_.cert_file = directory + "/current/cert.pem";
  mirror->credentials_.key_file = directory + "/current/key.pem";
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

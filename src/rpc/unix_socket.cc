#include "rpc/unix_socket.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/errno_text.h"

namespace cfdb::worker {
namespace {

constexpr char kBoundName[] = "/s";  // inside the private directory
constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;

absl::Status Errno(const std::string& path, const char* what) {
  return absl::InternalError(
      absl::StrCat("unix socket ", path, ": ", what, ": ", ErrnoText(errno)));
}

// StagingPattern is the private directory's mkdtemp pattern, beside `path`.
std::string StagingPattern(const std::string& path) {
  return absl::StrCat(path.substr(0, path.rfind('/')), "/.cfdb-XXXXXX");
}

// Listening says whether a process accepts connections on the socket at
// `path`, or the errno of connect(2) when it cannot tell.
absl::StatusOr<bool> Listening(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno(path, "socket");
  const int rc =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  close(fd);
  if (rc == 0) return true;
  if (error == ECONNREFUSED || error == ENOENT) return false;
  errno = error;
  return Errno(path, "connect");
}

}  // namespace

absl::Status CheckUnixSocketPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (path.empty() || path[0] != '/' || slash + 1 == path.size()) {
    return absl::InvalidArgumentError(
        "must be an absolute file name (e.g. /run/cfdb-worker/worker.sock, "
        "without unix:)");
  }
  const size_t staged = StagingPattern(path).size() + sizeof kBoundName - 1;
  if (std::max(path.size(), staged) > kMaxPath) {
    return absl::InvalidArgumentError(absl::StrCat(
        "is too long: a socket address holds ", kMaxPath,
        " bytes, and the worker binds in its directory under a name ",
        staged - slash, " bytes long"));
  }
  struct stat st {};
  const std::string directory = slash == 0 ? "/" : path.substr(0, slash);
  if (stat(directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("is in ", directory, ", which is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UnixSocketFile> UnixSocketFile::Claim(std::string path) {
  if (absl::Status s = CheckUnixSocketPath(path); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path ", path, " ", s.message()));
  }
  const std::string staging_pattern = StagingPattern(path);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("unix socket ", path,
                       ": exists and is not a socket; not replacing it"));
    }
    absl::StatusOr<bool> live = Listening(path);
    if (!live.ok()) return live.status();
    if (*live) {
      return absl::FailedPreconditionError(absl::StrCat(
          "unix socket ", path,
          ": another process (a worker still running?) accepts connections "
          "on it; not replacing it"));
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(path, "removing the stale file");
    }
  } else if (errno != ENOENT) {
    return Errno(path, "lstat");
  }
  std::string staging = staging_pattern;
  if (mkdtemp(staging.data()) == nullptr) {
    return Errno(path, "making a private directory beside it");
  }
  return UnixSocketFile(std::move(path), std::move(staging));
}

UnixSocketFile::UnixSocketFile(UnixSocketFile&& other) noexcept
    : path_(std::move(other.path_)),
      staging_(std::exchange(other.staging_, "")),
      device_(other.device_),
      inode_(other.inode_),
      published_(std::exchange(other.published_, false)) {}

UnixSocketFile::~UnixSocketFile() { DiscardStaging(); }

std::string UnixSocketFile::bind_target() const {
  return absl::StrCat("unix:", staging_, kBoundName);
}

void UnixSocketFile::DiscardStaging() {
  if (staging_.empty()) return;
  unlink(absl::StrCat(staging_, kBoundName).c_str());
  rmdir(staging_.c_str());
  staging_.clear();
}

absl::Status UnixSocketFile::Publish() {
  const std::string bound = absl::StrCat(staging_, kBoundName);
  if (chmod(bound.c_str(), S_IRUSR | S_IWUSR) != 0) {
    return Errno(path_, "chmod of the bound socket");
  }
  if (renameat2(AT_FDCWD, bound.c_str(), AT_FDCWD, path_.c_str(),
                RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("unix socket ", path_,
                       ": another process created it while this worker "
                       "started; not replacing it"));
    }
    return Errno(path_, "moving the socket into place");
  }
  DiscardStaging();
  struct stat st {};
  if (lstat(path_.c_str(), &st) != 0) return Errno(path_, "lstat");
  device_ = st.st_dev;
  inode_ = st.st_ino;
  published_ = true;
  return absl::OkStatus();
}

void UnixSocketFile::Remove() {
  DiscardStaging();
  if (!published_) return;
  published_ = false;
  struct stat st {};
  if (lstat(path_.c_str(), &st) == 0 && st.st_dev == device_ &&
      st.st_ino == inode_) {
    unlink(path_.c_str());
  }
}

bool IsUnixTarget(std::string_view target) {
  return target.starts_with("unix:") || target.starts_with("unix-abstract:");
}

}  // namespace cfdb::worker

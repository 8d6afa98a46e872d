#include "rpc/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/errno_text.h"

namespace cfdb::worker {
namespace {

// Listening says whether a process accepts connections on the socket at
// `address`, or the errno of connect(2) when it cannot tell.
absl::StatusOr<bool> Listening(const sockaddr_un& address) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  }
  const int rc =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  close(fd);
  if (rc == 0) return true;
  if (error == ECONNREFUSED) return false;
  return absl::InternalError(absl::StrCat("connect: ", ErrnoText(error)));
}

}  // namespace

absl::StatusOr<UnixSocketFile> UnixSocketFile::Claim(std::string path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return absl::InvalidArgumentError(
        absl::StrCat("unix socket path must be 1..",
                     sizeof address.sun_path - 1, " bytes, not ", path.size()));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return UnixSocketFile(std::move(path));
    return absl::InternalError(
        absl::StrCat("unix socket ", path, ": ", ErrnoText(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("unix socket ", path,
                     ": exists and is not a socket; not replacing it"));
  }
  absl::StatusOr<bool> live = Listening(address);
  if (!live.ok()) {
    return absl::InternalError(
        absl::StrCat("unix socket ", path, ": ", live.status().message()));
  }
  if (*live) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unix socket ", path,
        ": another process (a worker still running?) accepts connections on "
        "it; not replacing it"));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat(
        "unix socket ", path, ": removing the stale file: ", ErrnoText(errno)));
  }
  return UnixSocketFile(std::move(path));
}

absl::Status UnixSocketFile::Bound() {
  struct stat st {};
  if (lstat(path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::InternalError(
        absl::StrCat("unix socket ", path_, ": not there after binding"));
  }
  device_ = st.st_dev;
  inode_ = st.st_ino;
  bound_ = true;
  if (chmod(path_.c_str(), S_IRUSR | S_IWUSR) != 0) {
    return absl::InternalError(
        absl::StrCat("unix socket ", path_, ": chmod: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

void UnixSocketFile::Remove() {
  if (!bound_) return;
  bound_ = false;
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

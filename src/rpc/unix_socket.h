// The worker's Unix domain socket file: claimed before gRPC binds it (a
// stale file of a crashed run replaced, a live worker's refused), created
// owner-only, and removed on exit only if it is still ours.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cfdb::worker {

// UnixSocketFile is a socket file the server listens on. Not thread-safe.
class UnixSocketFile {
 public:
  // Claim makes `path` free for a new listening socket: nothing there, or a
  // stale socket file (no process accepts on it: connect(2) is refused),
  // which it removes. Errors: INVALID_ARGUMENT when the path is empty or
  // longer than a sockaddr_un holds (107 bytes); FAILED_PRECONDITION when
  // a process still listens there (another worker) or the path is not a
  // socket; the errno's text otherwise. gRPC itself would unlink whatever
  // socket is there, a live worker's too, which is why this comes first.
  static absl::StatusOr<UnixSocketFile> Claim(std::string path);

  // Bound records the file gRPC bound and makes it owner-only (0600), in
  // case the umask around the bind was not honoured. Call after the
  // server started.
  absl::Status Bound();

  // Remove unlinks the file if it is still the one Bound saw (a later
  // worker's file at the same path is left alone). Idempotent.
  void Remove();

  const std::string& path() const { return path_; }

 private:
  explicit UnixSocketFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  bool bound_ = false;
};

// IsUnixTarget says whether a gRPC target or peer names a Unix domain
// socket ("unix:PATH", "unix-abstract:NAME").
bool IsUnixTarget(std::string_view target);

}  // namespace cfdb::worker

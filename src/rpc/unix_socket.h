// The worker's Unix domain socket file: claimed before gRPC binds (a stale
// file of a crashed run replaced, a live worker's refused), bound in a
// private directory and moved into place owner-only, and removed on exit
// only if it is still ours.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cfdb::worker {

// UnixSocketFile is a socket file the server listens on. Not thread-safe.
// Movable; a file not yet published is cleaned up on destruction.
class UnixSocketFile {
 public:
  // Claim makes `path` (absolute) free for a new listening socket: nothing
  // there, or a stale socket file (no process accepts on it: connect(2) is
  // refused), which it removes; then makes the private directory (0700,
  // beside `path`) where gRPC binds. gRPC itself would unlink whatever
  // socket is at the path it binds, a live worker's too, which is why it
  // never binds `path` itself. Errors: INVALID_ARGUMENT for a path that is
  // not absolute or too long for a sockaddr_un (with the private name);
  // FAILED_PRECONDITION when a process still accepts on `path` (another
  // worker) or `path` is not a socket; the errno's text (INTERNAL) when
  // the directory cannot be read or written.
  static absl::StatusOr<UnixSocketFile> Claim(std::string path);

  UnixSocketFile(UnixSocketFile&& other) noexcept;
  UnixSocketFile& operator=(UnixSocketFile&&) = delete;
  ~UnixSocketFile();

  // bind_target is the gRPC address to listen on ("unix:" + the private
  // name).
  std::string bind_target() const;

  // Publish makes the bound socket owner-only (0600) and moves it to
  // `path`, refusing (FAILED_PRECONDITION) if something appeared there
  // since Claim. Call once the server started.
  absl::Status Publish();

  // Remove unlinks `path` if it is still the file Publish put there (a
  // later worker's file at the same path is left alone). Idempotent.
  void Remove();

  const std::string& path() const { return path_; }

 private:
  UnixSocketFile(std::string path, std::string staging)
      : path_(std::move(path)), staging_(std::move(staging)) {}
  void DiscardStaging();

  std::string path_;
  std::string staging_;  // the private directory; empty once gone
  dev_t device_ = 0;
  ino_t inode_ = 0;
  bool published_ = false;
};

// CheckUnixSocketPath says whether `path` can be a worker's socket: an
// absolute file name (not "unix:..."), short enough for a sockaddr_un with
// the private name bound beside it, in a directory that exists.
// INVALID_ARGUMENT saying what is wrong otherwise. Touches nothing.
absl::Status CheckUnixSocketPath(const std::string& path);

// IsUnixTarget says whether a gRPC target or peer names a Unix domain
// socket ("unix:PATH", "unix-abstract:NAME").
bool IsUnixTarget(std::string_view target);

}  // namespace cfdb::worker

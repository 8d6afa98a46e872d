// Who the daemon and its jobs run as: users named on the command line, and
// the daemon's own drop to the least it needs.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/serve_config.h"

namespace cfdb::worker {

// ResolveUser looks `spec` up: a name in the user database, or a number
// (which needs no entry; its group is the entry's, else the same number).
// INVALID_ARGUMENT naming what is wrong: an unknown name, a malformed
// number, uid 0 (root is no sandbox).
absl::StatusOr<User> ResolveUser(std::string_view spec);

// BecomeWorker gives the daemon the least it needs. Started as root with
// `worker_user`, it becomes that user keeping only CAP_SETUID, CAP_SETGID
// and CAP_KILL (with `keep_job_caps`) or nothing; started as root without
// one, it stays uid 0 but keeps only those capabilities with
// `keep_job_caps`, and everything without (a plain root run). Started as
// another user with `keep_job_caps`, it must hold CAP_SETUID and CAP_SETGID
// already (FAILED_PRECONDITION saying so), and drops every other capability.
// The bounding and ambient sets lose the rest too. Call while the process has
// one thread (glibc changes every thread's ids, but threads made before
// would keep the old capabilities). Then marks the process non-dumpable
// (PR_SET_DUMPABLE 0), so no job may ptrace it or read its memory.
absl::Status BecomeWorker(const std::optional<User>& worker_user,
                          bool keep_job_caps);

// CredentialFile is a file the worker trusts; `secret` for a private key,
// which no one else may read (a certificate or a CA is public).
struct CredentialFile {
  std::string path;
  bool secret = false;
};

// CredentialFileProblems returns a warning for each of `files` that is
// (a secret one) readable by group or others, writable by anyone but its
// owner, owned by a user other than root or the calling process's
// effective uid (call it as the worker), or in a directory such a user
// owns or group or others may write without the sticky bit (empty paths
// are skipped), e.g. "/run/tls/key.pem is readable by group or others
// (mode 0644)".
std::vector<std::string> CredentialFileProblems(
    const std::vector<CredentialFile>& files);

}  // namespace cfdb::worker

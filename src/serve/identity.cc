#include "serve/identity.h"

#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/errno_text.h"

namespace cfdb::worker {
namespace {

constexpr cap_value_t kJobCaps[] = {CAP_SETUID, CAP_SETGID, CAP_KILL};

// Entry looks a user up by name or uid; nullopt if there is none.
std::optional<passwd> Entry(const char* name, const uid_t* uid,
                            std::vector<char>& buffer) {
  buffer.resize(16384);
  passwd entry{};
  passwd* found = nullptr;
  const int error =
      name != nullptr
          ? getpwnam_r(name, &entry, buffer.data(), buffer.size(), &found)
          : getpwuid_r(*uid, &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) return std::nullopt;
  return entry;
}

// SetCaps makes `caps` the permitted and effective sets (inheritable and
// ambient empty).
absl::Status SetCaps(bool keep_job_caps) {
  std::unique_ptr<_cap_struct, decltype(&cap_free)> caps(cap_init(), cap_free);
  if (keep_job_caps) {
    cap_set_flag(caps.get(), CAP_PERMITTED, 3, kJobCaps, CAP_SET);
    cap_set_flag(caps.get(), CAP_EFFECTIVE, 3, kJobCaps, CAP_SET);
  }
  if (cap_set_proc(caps.get()) != 0) {
    return absl::InternalError(
        absl::StrCat("cap_set_proc: ", ErrnoText(errno)));
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  return absl::OkStatus();
}

bool HasEffective(cap_value_t cap) {
  std::unique_ptr<_cap_struct, decltype(&cap_free)> caps(cap_get_proc(),
                                                         cap_free);
  cap_flag_value_t value = CAP_CLEAR;
  return caps != nullptr &&
         cap_get_flag(caps.get(), cap, CAP_EFFECTIVE, &value) == 0 &&
         value == CAP_SET;
}

// DropBounding removes every capability but the jobs' from the bounding
// set (needs CAP_SETPCAP, which root has).
void DropBounding(bool keep_job_caps) {
  for (cap_value_t cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    const bool kept = keep_job_caps && (cap == CAP_SETUID ||
                                        cap == CAP_SETGID || cap == CAP_KILL);
    if (!kept) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  }
}

}  // namespace

absl::StatusOr<User> ResolveUser(std::string_view spec) {
  User user;
  user.name = std::string(spec);
  const size_t colon = spec.find(':');
  const std::string who(spec.substr(0, colon));
  std::vector<char> buffer;
  int64_t number = 0;
  std::optional<passwd> entry;
  if (absl::SimpleAtoi(who, &number)) {
    if (number <= 0 || number > 0x7fffffff) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", who, "' is not a uid above 0 (root is no sandbox)"));
    }
    user.uid = static_cast<uid_t>(number);
    entry = Entry(nullptr, &user.uid, buffer);
    user.gid = entry ? entry->pw_gid : user.uid;
  } else {
    entry = Entry(who.c_str(), nullptr, buffer);
    if (!entry)
      return absl::InvalidArgumentError(
          absl::StrCat("no user named '", who, "'"));
    if (entry->pw_uid == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", who, "' is root, and root is no sandbox"));
    }
    user.uid = entry->pw_uid;
    user.gid = entry->pw_gid;
  }
  if (entry) user.home = entry->pw_dir;
  if (colon != std::string_view::npos) {
    int64_t gid = 0;
    if (!absl::SimpleAtoi(std::string(spec.substr(colon + 1)), &gid) ||
        gid < 0 || gid > 0x7fffffff) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", std::string(spec.substr(colon + 1)), "' is not a gid"));
    }
    user.gid = static_cast<gid_t>(gid);
  }
  return user;
}

absl::Status BecomeWorker(const std::optional<User>& worker_user,
                          bool keep_job_caps) {
  if (geteuid() == 0 && (worker_user || keep_job_caps)) {
    DropBounding(keep_job_caps);
    if (worker_user) {
      // Keep the permitted set across the uid change, then take only what
      // jobs need.
      prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
      const gid_t groups[1] = {worker_user->gid};
      if (setgroups(1, groups) != 0 ||
          setresgid(worker_user->gid, worker_user->gid, worker_user->gid) !=
              0 ||
          setresuid(worker_user->uid, worker_user->uid, worker_user->uid) !=
              0) {
        return absl::InternalError(absl::StrCat(
            "cannot become ", worker_user->name, ": ", ErrnoText(errno)));
      }
      prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    if (absl::Status s = SetCaps(keep_job_caps); !s.ok()) return s;
  } else if (geteuid() != 0 && keep_job_caps) {
    if (!HasEffective(CAP_SETUID) || !HasEffective(CAP_SETGID)) {
      return absl::FailedPreconditionError(
          "jobs of another user need CAP_SETUID and CAP_SETGID: start the "
          "worker as root (with --worker-user to drop to a user of its own) "
          "or give it those capabilities");
    }
    if (absl::Status s = SetCaps(true); !s.ok()) return s;
  }
  // After every credential change, which resets it.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  return absl::OkStatus();
}

std::vector<std::string> CredentialFileProblems(
    const std::vector<CredentialFile>& files) {
  std::vector<std::string> problems;
  // Who else may rewrite what the worker trusts: not root, not the worker.
  const auto stranger = [](uid_t owner) {
    return owner != 0 && owner != geteuid();
  };
  for (const auto& [path, secret] : files) {
    struct stat st {};
    if (path.empty() || stat(path.c_str(), &st) != 0) continue;
    const unsigned mode = st.st_mode & 07777;
    if (secret && (mode & (S_IRGRP | S_IROTH)) != 0) {
      problems.push_back(absl::StrFormat(
          "%s is readable by group or others (mode %04o): chmod go-r it", path,
          mode));
    }
    if ((mode & (S_IWGRP | S_IWOTH)) != 0) {
      problems.push_back(absl::StrFormat(
          "%s is writable by group or others (mode %04o): chmod go-w it", path,
          mode));
    }
    if (stranger(st.st_uid)) {
      problems.push_back(absl::StrFormat(
          "%s is owned by uid %d, neither root nor the worker (uid %d), who "
          "may rewrite it: chown it",
          path, st.st_uid, geteuid()));
    }
    // A directory others may write (without the sticky bit) or that a
    // stranger owns lets them put another file in the file's place.
    const std::string dir = std::filesystem::path(path).parent_path().string();
    struct stat dir_st {};
    if (dir.empty() || stat(dir.c_str(), &dir_st) != 0) continue;
    const unsigned dir_mode = dir_st.st_mode & 07777;
    if (((dir_mode & (S_IWGRP | S_IWOTH)) != 0 && (dir_mode & S_ISVTX) == 0) ||
        stranger(dir_st.st_uid)) {
      problems.push_back(absl::StrFormat(
          "%s is in %s (mode %04o, uid %d), where another user may replace "
          "it: keep credentials in a directory only root or the worker may "
          "write",
          path, dir, dir_mode, dir_st.st_uid));
    }
  }
  return problems;
}

}  // namespace cfdb::worker

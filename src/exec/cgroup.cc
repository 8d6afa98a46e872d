#include "exec/cgroup.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/text.h"

namespace cfdb::worker {
namespace {

std::string ReadFile(const std::string& path) {
  return ReadFileText(path).value_or("");
}

// RemoveTree removes the cgroup at `dir` and every cgroup below it,
// deepest first (a cgroup directory goes with rmdir, never unlink).
void RemoveTree(const std::filesystem::path& dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_directory(error)) RemoveTree(entry.path());
  }
  rmdir(dir.c_str());
}

}  // namespace

// OwnCgroupDir returns the directory of this process's cgroup v2: the
// cgroup2 mount (/proc/self/mountinfo) joined with the path of the "0::"
// line of /proc/self/cgroup.
absl::StatusOr<std::string> OwnCgroupDir() {
  std::string mount;
  std::istringstream mounts(ReadFile("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE ...
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos ||
        !absl::StartsWith(line.substr(dash + 3), "cgroup2 ")) {
      continue;
    }
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4) mount = fields[4];
    break;
  }
  if (mount.empty())
    return absl::FailedPreconditionError("no cgroup v2 is mounted");
  std::istringstream groups(ReadFile("/proc/self/cgroup"));
  for (std::string line; std::getline(groups, line);) {
    if (absl::StartsWith(line, "0::")) return mount + line.substr(3);
  }
  return absl::FailedPreconditionError("this process is in no cgroup v2");
}

std::string JobsCgroupRoot(const std::string& own_dir) {
  // Decided once per process, before the guard forks (it inherits it): the
  // pid alone is not unique (every worker that is PID 1 of its namespace).
  static const std::string name = absl::StrCat(
      "cfdb-jobs-", getpid(), "-",
      std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007);
  std::string root = absl::StrCat(own_dir, "/", name);
  for (size_t at; (at = root.find("//")) != std::string::npos;)
    root.erase(at, 1);
  return root;
}

namespace {

// IsJobsRootName tells whether `name` is cfdb-jobs-<digits>-<digits>, as
// JobsCgroupRoot names them.
bool IsJobsRootName(std::string_view name) {
  constexpr std::string_view kPrefix = "cfdb-jobs-";
  if (!name.starts_with(kPrefix)) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dash = name.find('-');
  auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
  };
  return dash != std::string_view::npos && digits(name.substr(0, dash)) &&
         digits(name.substr(dash + 1));
}

}  // namespace

LeftoverCgroups RemoveLeftoverJobCgroups(const std::string& parent,
                                         const std::string& own) {
  LeftoverCgroups left;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    if (name == own || !IsJobsRootName(name) || !entry.is_directory(error)) {
      continue;
    }
    const int fd =
        open(entry.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (ReadFile(entry.path().string() + "/cgroup.events")
              .find("populated 0") == std::string::npos) {
        ++left.kept;
      } else {
        RemoveTree(entry.path());
        if (access(entry.path().c_str(), F_OK) != 0)
          left.removed.push_back(name);
      }
    }
    close(fd);  // and with it the lock
  }
  return left;
}

int KillCgroup(const std::string& dir) {
  std::istringstream procs(ReadFile(dir + "/cgroup.procs"));
  int held = 0;
  for (pid_t pid; procs >> pid;) ++held;
  std::ofstream(dir + "/cgroup.kill") << "1";
  // SIGKILL is delivered at once, but processes take a moment to exit; the
  // directory can go only once the cgroup is empty.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ReadFile(dir + "/cgroup.events").find("populated 1") !=
             std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  RemoveTree(dir);
  return held;
}

}  // namespace cfdb::worker

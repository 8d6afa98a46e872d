// Helpers that read /proc in tests.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cfdb::worker::test_support {

// ProcFile returns the contents of a /proc file, or "" when it cannot be
// read: the process may end while it is read, and libstdc++'s ifstream
// throws (whatever its exception mask) when read(2) fails with ESRCH.
inline std::string ProcFile(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

// StatusNumber returns a number field of /proc/<pid>/status ("Threads",
// "VmRSS" in KiB), or -1.
inline int64_t StatusNumber(pid_t pid, const std::string& field) {
  std::istringstream in(ProcFile(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(absl::StrCat(field, ":"))) continue;
    std::vector<std::string> words =
        absl::StrSplit(line.substr(field.size() + 1), absl::ByAnyChar(" \t"),
                       absl::SkipEmpty());
    int64_t value = -1;
    if (!words.empty() && absl::SimpleAtoi(words[0], &value)) return value;
  }
  return -1;
}

// Children returns the pids (zombies included) whose parent is `parent`.
inline std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const std::string stat = ProcFile(entry.path() / "stat");
    // pid (comm) state ppid ...; comm may hold spaces, so parse after ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(pid);
  }
  return children;
}

// Comm returns the command name of `pid` (/proc/<pid>/comm), "" if gone.
inline std::string Comm(pid_t pid) {
  std::istringstream in(ProcFile(absl::StrCat("/proc/", pid, "/comm")));
  std::string comm;
  std::getline(in, comm);
  return comm;
}

// JobChildren returns the children of a worker daemon `daemon` but its job
// guard (job_guard.h): the programs of its jobs and what they left.
inline std::vector<pid_t> JobChildren(pid_t daemon) {
  std::vector<pid_t> jobs;
  for (pid_t pid : Children(daemon)) {
    if (Comm(pid) != "cfdb-job-guard") jobs.push_back(pid);
  }
  return jobs;
}

}  // namespace cfdb::worker::test_support

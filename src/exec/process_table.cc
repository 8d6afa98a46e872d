#include "exec/process_table.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace cfdb::worker {

std::vector<pid_t> ProcFs::Children(pid_t pid) const {
  std::vector<pid_t> children;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/task"), error)) {
    std::ifstream in(task.path() / "children");
    for (pid_t child; in >> child;) children.push_back(child);
  }
  return children;
}

pid_t ProcFs::ProcessGroup(pid_t pid) const {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  const std::string stat((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  // pid (comm) state ppid pgrp ...; comm may hold anything, so after ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  pid_t ppid = 0, pgrp = -1;
  rest >> state >> ppid >> pgrp;
  return rest ? pgrp : -1;
}

std::vector<pid_t> Descendants(const ProcessTable& table, pid_t root) {
  std::vector<pid_t> found;
  absl::flat_hash_set<pid_t> seen = {root};
  std::deque<pid_t> next = {root};
  while (!next.empty()) {
    const pid_t pid = next.front();
    next.pop_front();
    for (pid_t child : table.Children(pid)) {
      if (!seen.insert(child).second) continue;  // a pid reused mid-walk
      found.push_back(child);
      next.push_back(child);
    }
  }
  return found;
}

std::vector<pid_t> Leftovers(const ProcessTable& table, pid_t self,
                             const absl::flat_hash_set<pid_t>& programs,
                             const absl::flat_hash_set<pid_t>& spared) {
  std::vector<pid_t> leftovers;
  for (pid_t child : table.Children(self)) {
    if (programs.contains(child) || spared.contains(child)) continue;
    const pid_t group = table.ProcessGroup(child);
    if (group < 0 || programs.contains(group)) continue;
    leftovers.push_back(child);
  }
  return leftovers;
}

}  // namespace cfdb::worker

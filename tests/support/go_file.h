// GoFile: a file a test's job waits for, so that the job outlasts whatever
// the test does first, however slow the machine.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cfdb::worker::test_support {

// GoFile is a path unique to this process and object. WaitCommand() is a
// shell command that waits until the file exists; Open() creates it. The
// file is removed when the GoFile is destroyed. Not thread-safe.
class GoFile {
 public:
  GoFile()
      : path_(absl::StrCat(::testing::TempDir(), "go-", getpid(), "-",
                           counter_++)) {}
  ~GoFile() { std::remove(path_.c_str()); }
  GoFile(const GoFile&) = delete;
  GoFile& operator=(const GoFile&) = delete;

  std::string WaitCommand() const {
    return absl::StrCat("until [ -e '", path_, "' ]; do sleep 0.01; done");
  }
  void Open() const { std::ofstream(path_).put('\n'); }

 private:
  static inline std::atomic<int> counter_{0};
  const std::string path_;
};

}  // namespace cfdb::worker::test_support

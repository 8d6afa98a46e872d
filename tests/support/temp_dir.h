// TempDir: a private directory for a test's files, removed with everything
// in it at the end.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cfdb::worker::test_support {

class TempDir {
 public:
  TempDir() {
    char dir[] = "/tmp/cfdb-test-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  ~TempDir() { std::filesystem::remove_all(dir_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // path returns the path of `name` inside the directory.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

}  // namespace cfdb::worker::test_support

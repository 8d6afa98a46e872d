// LoopbackAddress: the one place a test builds the address of a server it
// started on 127.0.0.1 (a WorkerServer's port(), a daemon's, a stub's).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace cfdb::worker::test_support {

inline std::string LoopbackAddress(int port) {
  return absl::StrCat("127.0.0.1:", port);
}

}  // namespace cfdb::worker::test_support

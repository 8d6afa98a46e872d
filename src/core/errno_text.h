// ErrnoText: what an errno value means, thread-safely (strerror(3) is not).
#pragma once

#include <string>
#include <system_error>

namespace cfdb::worker {

// ErrnoText returns the description of `error`, e.g. "No such file or
// directory". Safe from any thread.
inline std::string ErrnoText(int error) {
  return std::system_category().message(error);
}

}  // namespace cfdb::worker

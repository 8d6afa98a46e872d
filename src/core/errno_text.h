// ErrnoText: what an errno value means, thread-safely (strerror(3) is not).
#pragma once

#include <string.h>

#include <string>

namespace cfdb::worker {

// ErrnoText returns the description of `error`, e.g. "No such file or
// directory". Safe from any thread.
inline std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: returns the text, in `buffer` or a static string.
  return strerror_r(error, buffer, sizeof buffer);
}

}  // namespace cfdb::worker

#include "cfdb/worker/address.h"

#include "absl/strings/str_cat.h"

namespace cfdb::worker {

std::string JoinHostPort(std::string_view host, int port) {
  if (host.find(':') != host.npos && host.front() != '[') {
    return absl::StrCat("[", std::string(host), "]:", port);
  }
  return absl::StrCat(std::string(host), ":", port);
}

std::string LoopbackTarget(std::string_view host, int port) {
  if (host == "::" || host == "::1" || host == "[::]" || host == "[::1]") {
    return JoinHostPort("::1", port);
  }
  if (host == "0.0.0.0" || host == "localhost" || host.starts_with("127.")) {
    return JoinHostPort("127.0.0.1", port);
  }
  return JoinHostPort(host, port);
}

}  // namespace cfdb::worker

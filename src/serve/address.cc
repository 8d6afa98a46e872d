#include "serve/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cfdb::worker {
namespace {

std::string_view Unbracketed(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// LocalhostIsLoopback resolves "localhost" as gRPC will and says whether
// every address it has is a loopback one (an /etc/hosts entry could say
// otherwise).
bool LocalhostIsLoopback() {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo("localhost", nullptr, &hints, &found) != 0) return false;
  bool loopback = found != nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loopback = loopback && (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loopback = loopback && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    } else {
      loopback = false;
    }
  }
  freeaddrinfo(found);
  return loopback;
}

}  // namespace

std::string JoinHostPort(std::string_view host, int port) {
  if (host.find(':') != host.npos && host.front() != '[') {
    return absl::StrCat("[", std::string(host), "]:", port);
  }
  return absl::StrCat(std::string(host), ":", port);
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost") return LocalhostIsLoopback();
  in_addr v4{};
  if (inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return inet_pton(AF_INET6, std::string(Unbracketed(host)).c_str(), &v6) ==
             1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

bool TargetHasPort(std::string_view target) {
  if (target.starts_with("unix:") || target.starts_with("unix-abstract:")) {
    return true;
  }
  for (std::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (target.starts_with(scheme)) {
      target.remove_prefix(scheme.size());
      break;
    }
  }
  if (target.starts_with("//")) {  // dns://AUTHORITY/HOST:PORT
    target.remove_prefix(2);
    const std::size_t slash = target.find('/');
    if (slash == target.npos) return false;
    target.remove_prefix(slash + 1);
  }
  const std::size_t colon = target.rfind(':');
  if (colon == target.npos) return false;
  const std::string_view host = target.substr(0, colon);
  const std::string_view port = target.substr(colon + 1);
  if (host.empty() || port.empty()) return false;
  for (char c : port) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  // An IPv6 host needs its brackets, or its last group reads as the port.
  return host.find(':') == host.npos ||
         (host.front() == '[' && host.back() == ']');
}

std::string LoopbackTarget(std::string_view host, int port) {
  const std::string_view bare = Unbracketed(host);
  if (bare == "::") return JoinHostPort("::1", port);
  if (bare == "0.0.0.0" || bare == "localhost") {
    return JoinHostPort("127.0.0.1", port);
  }
  return JoinHostPort(bare, port);
}

}  // namespace cfdb::worker

#include "cli/fleet_dns.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cfdb::worker::cli {
namespace {

absl::Status Malformed(const std::string& source, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--addresses-from: '", source, "' ", what,
                   " (dns:NAME:PORT, e.g. dns:cfdb-worker.jobs.svc:50051)"));
}

// Text is one resolved address as a worker address with `port`.
std::string Text(const addrinfo& info, const std::string& port) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (info.ai_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(info.ai_addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text.data(), text.size());
    return absl::StrCat("[", std::string(text.data()), "]:", port);
  }
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(info.ai_addr);
  inet_ntop(AF_INET, &in4->sin_addr, text.data(), text.size());
  return absl::StrCat(std::string(text.data()), ":", port);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveFleet(
    std::string_view source_view) {
  const std::string source(source_view);
  const std::string rest = source.substr(std::string_view(kDnsPrefix).size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return Malformed(source, "has no port");
  if (colon == 0) return Malformed(source, "has no name");
  const std::string name = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  uint32_t number = 0;
  if (port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &number) || number < 1 || number > 65535) {
    return Malformed(source, "has no port 1..65535");
  }
  if (name.find(':') != std::string::npos) {
    return Malformed(source, "names no DNS name");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;  // one entry per address, not per type
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(name.c_str(), port.c_str(), &hints, &found);
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found,
                                                                 &freeaddrinfo);
  std::vector<std::string> addresses;
  if (error == EAI_NONAME || error == EAI_NODATA) return addresses;
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat(
        "--addresses-from: '", source, "': ", std::string(gai_strerror(error)),
        error == EAI_AGAIN ? " (the name's servers did not answer; retry)"
                           : ""));
  }
  for (const addrinfo* info = found; info != nullptr; info = info->ai_next) {
    if (info->ai_family == AF_INET || info->ai_family == AF_INET6) {
      addresses.push_back(Text(*info, port));
    }
  }
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()),
                  addresses.end());
  return addresses;
}

}  // namespace cfdb::worker::cli

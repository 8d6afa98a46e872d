#include "rpc/abuse_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"

namespace cfdb::worker {
namespace {

// PeerOf formats a socket's remote address the way gRPC names a peer.
std::string PeerOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return absl::StrCat("ipv4:", text, ":", ntohs(v4->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    // gRPC's dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d, and
    // names them as IPv4.
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], text, sizeof text);
      return absl::StrCat("ipv4:", text, ":", ntohs(v6->sin6_port));
    }
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return absl::StrCat("ipv6:[", text, "]:", ntohs(v6->sin6_port));
  }
  return "";
}

}  // namespace

bool AbuseGuard::CutConnection(const std::string& peer) {
  bool found = false;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    struct stat st {};
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd) || fd <= 2 ||
        fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || PeerOf(fd) != peer) {
      continue;
    }
    // Aborted, not shut down: after shutdown(2) what the client had sent
    // stays readable, and gRPC read on and made a call of every stream in
    // it (about 4,400 more per cut, for 0.7 s; docs/SECURITY.md). connect(2)
    // to AF_UNSPEC is Linux's abort: it drops what is queued and answers
    // RST, so gRPC's next read fails and it closes the transport with all
    // of its calls. Not close(2): the descriptor stays gRPC's.
    sockaddr unspecified{};
    unspecified.sa_family = AF_UNSPEC;
    if (connect(fd, &unspecified, sizeof unspecified) != 0) {
      shutdown(fd, SHUT_RDWR);
    }
    found = true;
  }
  return found;
}

void AbuseGuard::ResetBeforeRequest(const std::string& peer) {
  const TimePoint now = SteadyClock::Get().Now();
  {
    absl::MutexLock lock(&mu_);
    // Bounded: entries of other connections go when the map grows.
    if (windows_.size() > 4096) windows_.clear();
    Window& window = windows_[peer];
    if (now - window.start >= kResetWindow) window = Window{.start = now};
    if (window.cut || ++window.resets <= kMaxResetsPerWindow) return;
    window.cut = true;
  }
  const bool cut = CutConnection(peer);
  log_.Log("connection cut: rapid reset", spdlog::level::warn,
           absl::StrCat("connection from ", EscapedForLog(peer), ": more than ",
                        kMaxResetsPerWindow,
                        " calls in a second ended before their request (the "
                        "rapid-reset pattern): ",
                        cut ? "connection cut" : "its socket was not found"),
           {{"peer", EscapedForLog(peer)}, {"abuse", "rapid reset"}});
}

}  // namespace cfdb::worker

#include "rpc/tls_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "rpc/san_match.h"

namespace cfdb::worker {
namespace {

// Connected opens a TCP connection to `host`:`port` within `timeout`, its
// reads and writes each bounded by `timeout` too; -1 when it cannot.
int Connected(const std::string& host, const std::string& port,
              Duration timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return -1;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found,
                                                               freeaddrinfo);
  const int fd =
      socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  pollfd connecting{.fd = fd, .events = POLLOUT, .revents = 0};
  int error = 0;
  socklen_t length = sizeof error;
  const bool connected =
      connect(fd, found->ai_addr, found->ai_addrlen) == 0 ||
      (errno == EINPROGRESS &&
       poll(&connecting, 1, static_cast<int>(ms)) == 1 &&
       getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
       error == 0);
  const timeval each{.tv_sec = static_cast<time_t>(ms / 1000),
                     .tv_usec = static_cast<suseconds_t>(ms % 1000 * 1000)};
  if (!connected || fcntl(fd, F_SETFL, 0) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &each, sizeof each) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &each, sizeof each) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// NoteServerHello is OpenSSL's message callback: it sets the flag `seen`
// points to when a ServerHello arrives.
void NoteServerHello(int write_p, int /*version*/, int content_type,
                     const void* buf, size_t len, SSL* /*ssl*/, void* seen) {
  if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      *static_cast<const unsigned char*>(buf) == SSL3_MT_SERVER_HELLO) {
    *static_cast<bool*>(seen) = true;
  }
}

}  // namespace

bool SpeaksTls(const std::string& address, Duration timeout) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return false;
  }
  // Not "unix:/path", "dns:///host:port" or "ipv4:...": a host:port only.
  const std::string host = HostOf(address.substr(0, colon));
  if (host.empty() || address.find('/') != std::string::npos ||
      absl::StrContains(host, ':') != absl::StrContains(address, '[')) {
    return false;
  }
  const int fd = Connected(host, std::to_string(port), timeout);
  if (fd < 0) return false;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(
      SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(
      context ? SSL_new(context.get()) : nullptr, SSL_free);
  bool seen = false;
  if (ssl && SSL_set_fd(ssl.get(), fd) == 1) {
    SSL_set_msg_callback(ssl.get(), NoteServerHello);
    SSL_set_msg_callback_arg(ssl.get(), &seen);
    (void)SSL_connect(ssl.get());  // verifies nothing: only the hello counts
  }
  ssl.reset();
  close(fd);
  return seen;
}

}  // namespace cfdb::worker

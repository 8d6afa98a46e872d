// Host:port formatting shared by the server, the serve loop and clients.
#pragma once

#include <string>
#include <string_view>

namespace cfdb::worker {

// JoinHostPort formats host and port, bracketing an IPv6 host.
std::string JoinHostPort(std::string_view host, int port);

// LoopbackTarget returns the address the serve loop dials to poll its own
// worker: 127.0.0.1 (or [::1]) for a wildcard or loopback host, otherwise
// the listen host; with `port`.
std::string LoopbackTarget(std::string_view host, int port);

}  // namespace cfdb::worker

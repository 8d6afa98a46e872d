// Hosts and host:port addresses, shared by serve, its self-poll and the
// client commands.
#pragma once

#include <string>
#include <string_view>

namespace cfdb::worker {

// JoinHostPort formats host and port, bracketing an IPv6 host.
std::string JoinHostPort(std::string_view host, int port);

// IsLoopbackHost returns true for an IP literal of the loopback network
// (127.0.0.0/8, ::1, also bracketed), parsed with inet_pton, and for
// "localhost" when every address it resolves to is one: "127.evil.example",
// "127.0.0.1.nip.io" or "127.0.0.1 " are not loopback, whatever they
// resolve to today.
bool IsLoopbackHost(std::string_view host);

// TargetHasPort says whether a client's target names the port to dial:
// HOST:PORT, [IPV6]:PORT, after an optional dns:, dns:/// or ipv4:/ipv6:
// scheme; a unix: or unix-abstract: target needs none. gRPC would dial a
// target without one on port 443, which no worker listens on by default.
bool TargetHasPort(std::string_view target);

// kTargetForms names the forms of a target, for a message that refuses one.
inline constexpr std::string_view kTargetForms =
    "HOST:PORT, e.g. 127.0.0.1:50051, [::1]:50051 or unix:PATH";

// LoopbackTarget returns the address the serve loop dials to poll its own
// worker, with `port`: 127.0.0.1 (or [::1]) for a wildcard host or
// "localhost", otherwise the listen host itself.
std::string LoopbackTarget(std::string_view host, int port);

}  // namespace cfdb::worker

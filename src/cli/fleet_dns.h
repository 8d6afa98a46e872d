// The fleet from DNS: every A and AAAA record of a name, as worker
// addresses (reap and status, --addresses-from dns:NAME:PORT).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cfdb::worker::cli {

// kDnsPrefix marks an --addresses-from source that is a DNS name.
inline constexpr char kDnsPrefix[] = "dns:";

// ResolveFleet resolves `source`, "dns:NAME:PORT", through the C library's
// resolver (getaddrinfo: /etc/nsswitch.conf, /etc/hosts, /etc/resolv.conf,
// as every other program of the host resolves), and returns one
// "ADDRESS:PORT" per distinct address, IPv6 ones as "[ADDRESS]:PORT",
// sorted. A headless Service of Kubernetes (or a Cloud Map name of ECS)
// answers with the address of every ready pod (task).
//
// A name that does not exist or has no address records resolves to no
// workers, not to an error: a fleet scaled to zero is a headless Service
// without endpoints, which answers NXDOMAIN.
//
// Errors: INVALID_ARGUMENT naming --addresses-from when `source` is not
// dns:NAME:PORT with a port 1..65535; UNAVAILABLE when the resolver failed
// for now (no answer, a server failure: EAI_AGAIN) or for another reason it
// names. Blocks for as long as the resolver does (resolv.conf's timeout and
// attempts). Thread-safe.
absl::StatusOr<std::vector<std::string>> ResolveFleet(std::string_view source);

}  // namespace cfdb::worker::cli

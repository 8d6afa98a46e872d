// Server identity by SANs only, for the client side of mutual TLS.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cfdb::worker {

// DnsNameMatches returns whether the SAN DNS name `pattern` covers `host`,
// ignoring case: equal, or "*.rest" where `host` is one label followed by
// ".rest" (RFC 6125 section 6.4.3, the wildcard as the whole leftmost label
// only). A trailing dot on either is ignored.
bool DnsNameMatches(std::string_view pattern, std::string_view host);

// HostOf returns the host of a gRPC target name ("host:port", "[v6]:port",
// or a bare host), without brackets.
std::string HostOf(std::string_view target);

// IdentityProblem returns "" when `host` is covered by one of the
// certificate's SANs (DNS names, or IP addresses when `host` is an IP
// literal), else why not, naming the SANs seen. The Common Name is never
// consulted.
std::string IdentityProblem(std::string_view host,
                            const std::vector<std::string>& dns_names,
                            const std::vector<std::string>& ip_names);

}  // namespace cfdb::worker

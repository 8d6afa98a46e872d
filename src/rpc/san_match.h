// Identities by SANs only: the worker's, as a client verifies it, and a
// caller's, as admission matches it.
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

// AdmissionMatches returns whether the admission entry `entry` admits the
// peer identity `identity` (a SAN DNS name or URI): a DNS name as
// DnsNameMatches says ("*.rest" covers one label; case is ignored), a URI
// exactly. An identity that holds a '*' (a wildcard certificate) is no
// caller's name and never matches.
bool AdmissionMatches(std::string_view entry, std::string_view identity);

// AdmissionEntryProblem returns "" for an admission entry that can match
// some identity, else why it never can: a '*' anywhere but as the whole
// leftmost label of a DNS name ("*.ops.example"), a '*' in a URI, an IP
// address (admission matches DNS and URI SANs only).
std::string AdmissionEntryProblem(std::string_view entry);

}  // namespace cfdb::worker

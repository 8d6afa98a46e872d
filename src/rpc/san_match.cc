#include "rpc/san_match.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/text.h"

namespace cfdb::worker {
namespace {

std::string_view WithoutTrailingDot(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  return name;
}

// Canonical returns the binary form of an IP literal, or "" for none.
std::string Canonical(std::string_view text) {
  const std::string s(text);
  unsigned char buffer[sizeof(in6_addr)];
  if (inet_pton(AF_INET, s.c_str(), buffer) == 1) {
    return std::string(reinterpret_cast<char*>(buffer), 4);
  }
  if (inet_pton(AF_INET6, s.c_str(), buffer) == 1) {
    return std::string(reinterpret_cast<char*>(buffer), 16);
  }
  return "";
}

}  // namespace

bool DnsNameMatches(std::string_view pattern, std::string_view host) {
  pattern = WithoutTrailingDot(pattern);
  host = WithoutTrailingDot(host);
  if (pattern.empty() || host.empty()) return false;
  const std::string p = absl::AsciiStrToLower(std::string(pattern));
  const std::string h = absl::AsciiStrToLower(std::string(host));
  if (!p.starts_with("*.")) return p == h;
  const std::string_view rest = std::string_view(p).substr(1);  // ".example"
  const size_t dot = h.find('.');
  return dot != std::string::npos && dot > 0 &&
         std::string_view(h).substr(dot) == rest &&
         rest.find('*') == std::string_view::npos;
}

namespace {

// A URI has a scheme and a colon; a DNS name never does.
bool IsUri(std::string_view name) {
  return name.find(':') != std::string_view::npos;
}

}  // namespace

bool AdmissionMatches(std::string_view entry, std::string_view identity) {
  if (IsUri(entry) || IsUri(identity)) return entry == identity;
  // A certificate's wildcard name stands for many hosts, never one caller.
  if (identity.find('*') != std::string_view::npos) return false;
  return DnsNameMatches(entry, identity);
}

std::string AdmissionEntryProblem(std::string_view entry) {
  if (!Canonical(entry).empty()) {
    return "is an IP address, and admission matches DNS and URI SANs only";
  }
  if (entry.find('*') == std::string_view::npos) return "";
  if (IsUri(entry)) return "is a URI with a '*', and URIs match exactly";
  if (!entry.starts_with("*.") || entry.size() == 2 ||
      entry.find('*', 1) != std::string_view::npos) {
    return "has a '*' other than as the whole leftmost label of a DNS name "
           "(as in *.ops.example)";
  }
  return "";
}

std::string HostOf(std::string_view target) {
  if (target.starts_with("[")) {
    const size_t end = target.find(']');
    return std::string(
        target.substr(1, end == target.npos ? target.npos : end - 1));
  }
  const size_t colon = target.rfind(':');
  // A bare IPv6 literal has several colons and no port.
  if (colon != target.npos && target.find(':') == colon) {
    return std::string(target.substr(0, colon));
  }
  return std::string(target);
}

std::string IdentityProblem(std::string_view host,
                            const std::vector<std::string>& dns_names,
                            const std::vector<std::string>& ip_names) {
  if (const std::string ip = Canonical(host); !ip.empty()) {
    for (const std::string& name : ip_names) {
      if (Canonical(name) == ip) return "";
    }
  } else {
    for (const std::string& name : dns_names) {
      if (DnsNameMatches(name, host)) return "";
    }
  }
  std::vector<std::string> seen;
  seen.reserve(dns_names.size() + ip_names.size());
  for (const std::string& n : dns_names)
    seen.push_back(absl::StrCat("DNS:", n));
  for (const std::string& n : ip_names) seen.push_back(absl::StrCat("IP:", n));
  return EscapedForLog(absl::StrCat(
      "the worker's certificate has no SAN for '", std::string(host),
      "' (SANs: ", seen.empty() ? "none" : absl::StrJoin(seen, ", "),
      "; the Common Name is never used)"));
}

}  // namespace cfdb::worker

// config_fuzz: arbitrary flag values and environment values through
// ResolveServeConfig, which must accept them or refuse them with
// INVALID_ARGUMENT, never crash; an accepted configuration must be within
// the documented ranges.
//
// Input: lines "NAME=VALUE". A NAME starting with "--" is a flag given on the
// command line; any other NAME is an environment variable. A line without
// '=' sets NAME to the empty string. TLS file paths are confined to a
// directory that does not exist, so the fuzzer cannot make the resolver read
// /dev/zero or a FIFO.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "serve/config.h"

namespace {

using cfdb::worker::Duration;

bool IsTlsFile(std::string_view name) {
  for (std::string_view file :
       {"--tls-ca", "--tls-cert", "--tls-key", "CFDB_WORKER_TLS_CA",
        "CFDB_WORKER_TLS_CERT", "CFDB_WORKER_TLS_KEY"}) {
    if (name == file) return true;
  }
  return false;
}

std::string Confine(std::string path) {
  if (path.empty()) return "";
  std::replace(path.begin(), path.end(), '/', '_');
  return "/nonexistent/cfdb-config-fuzz/" + path;
}

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  cfdb::worker::KnobValues flags;
  std::map<std::string, std::string, std::less<>> env;
  for (size_t start = 0; start <= input.size();) {
    size_t end = input.find('\n', start);
    if (end == input.npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    start = end + 1;
    const size_t eq = line.find('=');
    const std::string_view name = line.substr(0, eq);
    std::string value(eq == line.npos ? "" : line.substr(eq + 1));
    if (IsTlsFile(name)) value = Confine(value);
    if (name.starts_with("--")) {
      flags[std::string(name)] = value;
    } else {
      env[std::string(name)] = value;
    }
  }
  const cfdb::worker::EnvLookup lookup =
      [&env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };

  absl::StatusOr<cfdb::worker::ServeConfig> config =
      cfdb::worker::ResolveServeConfig(flags, lookup);
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("not INVALID_ARGUMENT", config.status().ToString());
    }
    if (config.status().message().empty()) Fail("no message", "");
    return 0;
  }
  const auto& c = *config;
  const auto& r = c.retirement;
  if (c.host.empty()) Fail("accepted an empty host", "");
  if (c.port < 0 || c.port > 65535) Fail("port out of range", c.host);
  if (r.idle_timeout < Duration::zero()) Fail("negative idle timeout", "");
  if (r.idle_poll_interval <= Duration::zero()) Fail("poll interval <= 0", "");
  if (r.idle_poll_deadline <= Duration::zero() ||
      r.idle_poll_deadline > r.idle_poll_interval) {
    Fail("poll deadline outside (0, interval]", "");
  }
  if (r.idle_poll_failure_limit < 1) Fail("failure limit < 1", "");
  if (r.max_lifetime < Duration::zero()) Fail("negative max lifetime", "");
  if (c.worker.max_concurrent_tasks < 1) Fail("concurrency < 1", "");
  if (c.worker.task_kill_grace < Duration::zero())
    Fail("negative kill grace", "");
  return 0;
}

#include "serve/tls_knobs.h"

#include <cstdlib>
#include <cstring>

namespace cfdb::worker {

absl::StatusOr<TlsSettings> ResolveTlsSettings(const Settings& settings) {
  TlsSettings tls;
  // A file not given is named by its flag in messages ("--tls-cert is
  // missing").
  tls.ca.source = "--tls-ca";
  tls.cert.source = "--tls-cert";
  tls.key.source = "--tls-key";
  if (absl::Status s = settings.Apply(tls); !s.ok()) return s;
  return tls;
}

absl::StatusOr<Credentials> ResolveCredentials(const Settings& settings) {
  absl::StatusOr<TlsSettings> tls = ResolveTlsSettings(settings);
  if (!tls.ok()) return tls.status();
  return MakeCredentials(*tls);
}

std::vector<std::string> SecretVariables(const Settings& settings) {
  std::vector<std::string> names;
  for (const char* flag : {"--tls-ca-env", "--tls-cert-env", "--tls-key-env"}) {
    if (const std::string name = settings.Get(flag).text; !name.empty()) {
      names.push_back(name);
    }
  }
  return names;
}

void WipeVariables(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): before any thread starts
    if (char* value = std::getenv(name.c_str())) {
      std::fill(value, value + std::strlen(value), '\0');
    }
    unsetenv(name.c_str());  // NOLINT(concurrency-mt-unsafe): as above
  }
}

}  // namespace cfdb::worker

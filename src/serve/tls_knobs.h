// The TLS knobs, which `serve` and every client command share: their
// settings from flags and variables, the credentials made of them, and the
// variables holding PEMs, to wipe once read.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"
#include "serve/knobs.h"

namespace cfdb::worker {

// ResolveTlsSettings reads the TLS knobs of `settings`. A PEM may come from
// a file (--tls-ca) or from the variable another knob names (--tls-ca-env),
// not both; INVALID_ARGUMENT naming the knob otherwise, when the variable is
// unset, or for a bad value.
absl::StatusOr<TlsSettings> ResolveTlsSettings(const Settings& settings);

// ResolveCredentials builds credentials from the TLS knobs (see
// MakeCredentials for the checks), with ResolveTlsSettings' errors.
absl::StatusOr<Credentials> ResolveCredentials(const Settings& settings);

// SecretVariables returns the variables the TLS knobs name as holding PEMs
// (--tls-*-env), for WipeVariables once they are read.
std::vector<std::string> SecretVariables(const Settings& settings);

// WipeVariables overwrites the values of `names` in this process's
// environment with NULs where they lie (so /proc/<pid>/environ no longer
// shows them) and unsets them. Not thread-safe: call before threads start.
void WipeVariables(const std::vector<std::string>& names);

}  // namespace cfdb::worker

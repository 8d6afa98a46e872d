// The TLS files of a Credentials, read and checked as one set: shared by
// MakeCredentials, the serve configuration and the CredentialMirror.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cfdb/worker/credentials.h"

namespace cfdb::worker {

// PemSet is the text of the three PEMs.
struct PemSet {
  std::string ca, cert, key;
  friend bool operator==(const PemSet&, const PemSet&) = default;
};

// ReadPemSet reads the three files of `settings` (or takes their inline
// PEMs); INVALID_ARGUMENT naming the knob and path of one that cannot be
// read.
absl::StatusOr<PemSet> ReadPemSet(const TlsSettings& settings);

// CheckPemSet checks `pems` as MakeCredentials documents: each parses, the
// key belongs to the first certificate, which chains to the CA (through
// the intermediates after it) and is valid now. INVALID_ARGUMENT naming
// the knob and path at fault.
absl::Status CheckPemSet(const TlsSettings& settings, const PemSet& pems);

// CheckServingSet is CheckPemSet for a server's own set, and more: that
// the worker's self-poll can succeed with it (`self`). The certificate
// must verify for both TLS roles, as the worker presents it as the server
// and, polling itself, as a client (OpenSSL's purpose checks: an
// extendedKeyUsage, if present, with serverAuth and clientAuth; a keyUsage,
// if present, allowing the handshake), and not be revoked by the CRL
// directory, if one is set; `self.host` must be one of its SANs
// (never the Common Name); with admission lists, one of its identities
// (DNS or URI SANs) must be admitted to call Idle. INVALID_ARGUMENT naming
// the setting at fault.
absl::Status CheckServingSet(const TlsSettings& settings, const PemSet& pems,
                             const SelfPollCheck& self);

}  // namespace cfdb::worker

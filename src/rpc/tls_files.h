// The TLS files of a Credentials, read and checked as one set: shared by
// MakeCredentials and the CredentialMirror.
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

}  // namespace cfdb::worker

// Transport credentials shared by the worker's server and its clients:
// plaintext, or mutual TLS from PEM files that are re-read while running.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// Credentials describe how a server listens or a client dials. A plain value
// that names files; it is compared to pool channels.
//
// Mutual TLS: the server presents `cert_file`/`key_file`, requires a client
// certificate and verifies it against `ca_file`; a client presents its own
// pair and verifies the server against `ca_file` and the expected identity.
// Certificates rotate without a restart: gRPC's file-watching certificate
// provider re-reads the files every `refresh_interval`, so replace them
// atomically (write elsewhere, then rename over), never in place.
struct Credentials {
  enum class Kind { kInsecure, kMutualTls };

  static Credentials Insecure() { return Credentials{}; }

  Kind kind = Kind::kInsecure;
  std::string ca_file;    // PEM bundle of trusted CAs
  std::string cert_file;  // PEM certificate chain presented to the peer
  std::string key_file;   // PEM private key of cert_file
  // The SAN a client expects on the worker's certificate; empty: verify
  // against the host it dials. Unused by servers.
  std::string identity;
  Duration refresh_interval = std::chrono::seconds(60);

  // Key returns a string that is equal for equal credentials (channel pool).
  std::string Key() const;

  friend bool operator==(const Credentials&, const Credentials&) = default;
};

// TlsSettings are the TLS knobs as given, each with the flag or variable it
// came from (for messages); empty paths mean "not set".
struct TlsSettings {
  struct File {
    std::string path;
    std::string source;  // e.g. "--tls-ca" or "CFDB_WORKER_TLS_CA"
    // The PEM itself, when it came from an environment variable rather
    // than a file (`path` is then empty until WritePemFiles).
    std::string pem;
  };
  File ca, cert, key;
  std::string identity;
  Duration refresh_interval = std::chrono::seconds(60);
};

// MakeCredentials turns settings into credentials: none of the three files
// set is insecure; all three is mutual TLS after checking that each file is
// readable PEM (certificates in `ca` and `cert`, a private key in `key`)
// and that the key belongs to the certificate. INVALID_ARGUMENT naming the
// knob: some but not all files set (says which are missing), a file that
// cannot be read or parsed (with the path and reason), a mismatched key, a
// refresh interval under 1 s.
// A PEM given inline (File::pem) is checked the same way; its path in the
// credentials stays empty until WritePemFiles. An encrypted key is refused
// (no pass phrase is ever asked for).
absl::StatusOr<Credentials> MakeCredentials(const TlsSettings& settings);

// WritePemFiles writes the inline PEMs of `settings` into files of a new
// directory under `parent` that only this user may read (0700, files
// 0600), and returns `credentials` naming them. INTERNAL if the directory
// or a file cannot be made.
absl::StatusOr<Credentials> WritePemFiles(const TlsSettings& settings,
                                          Credentials credentials,
                                          const std::string& parent = "/tmp");

}  // namespace cfdb::worker

// Transport credentials shared by the worker's server and its clients:
// plaintext, or mutual TLS from PEM files that are re-read while running.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// Credentials describe how a server listens or a client dials. A plain value
// that names files; it is compared to pool channels.
//
// Mutual TLS: the server presents `cert_file`/`key_file`, requires a client
// certificate and verifies it against `ca_file`; a client presents its own
// pair and verifies the server against `ca_file` and the expected identity.
// Identities are SANs only: a client accepts the worker's certificate when
// a SAN DNS name (a leading "*." covering exactly one label) or IP address
// matches `identity` (or the dialled host), never by the Common Name.
// Certificates rotate without a restart: gRPC's file-watching certificate
// provider re-reads the files every `refresh_interval`. A server should be
// given a CredentialMirror's credentials, so that it never presents a key
// that does not match its certificate while files are replaced.
struct Credentials {
  enum class Kind { kInsecure, kMutualTls };

  static Credentials Insecure() { return Credentials{}; }

  Kind kind = Kind::kInsecure;
  std::string ca_file;    // PEM bundle of trusted CAs
  std::string cert_file;  // PEM certificate chain presented to the peer
  std::string key_file;   // PEM private key of cert_file
  // The three PEMs themselves, set when any of them was given inline
  // (TlsSettings::File::pem, e.g. from an environment variable): gRPC then
  // takes them as data, read once (no rotation), not from the files.
  std::string ca_pem, cert_pem, key_pem;
  // The SAN a client expects on the worker's certificate; empty: verify
  // against the host it dials. Unused by servers.
  std::string identity;
  Duration refresh_interval = std::chrono::seconds(60);
  // A directory of hashed CRL files (`openssl rehash`), enforced on every
  // handshake by gRPC (TlsCredentialsOptions::set_crl_directory); empty:
  // none.
  std::string crl_directory;

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
    // than a file (`path` is then empty; see CredentialMirror).
    std::string pem;
  };
  File ca, cert, key;
  std::string identity;
  Duration refresh_interval = std::chrono::seconds(60);
  std::string crl_directory;
};

// MakeCredentials turns settings into credentials: none of the three files
// set is insecure; all three is mutual TLS after checking that each file is
// readable PEM (certificates in `ca` and `cert`, a private key in `key`),
// that the key belongs to the certificate and that the certificate (with
// the intermediates after it in its file) chains to the CA and is valid
// now. INVALID_ARGUMENT naming the knob: some but not all files set (says
// which are missing), a file that cannot be read or parsed (with the path
// and reason), a mismatched key, a chain that does not verify (OpenSSL's
// reason), a refresh interval under 1 s, a CRL directory that is not one.
// A PEM given inline (File::pem) is checked the same way; its path in the
// credentials stays empty and the three PEMs go in as data (ca_pem, ...),
// so a client works with them directly; a server should still be given a
// CredentialMirror's files, which rotate. An encrypted key is
// refused (no pass phrase is ever asked for).
absl::StatusOr<Credentials> MakeCredentials(const TlsSettings& settings);

// SelfPollCheck is what a server's own certificate must allow so that the
// worker's loopback self-poll, which presents that certificate as a client
// and verifies it as the server, can succeed. Empty `host`: not checked.
struct SelfPollCheck {
  // The name the self-poll verifies: the --tls-identity, or the loopback
  // address it dials; and the setting it came from, for messages (empty:
  // the loopback address, and the certificate is named instead).
  std::string host;
  std::string host_source;
  // The admission entries that may call Idle (control and observe), and
  // the setting to name when none admits the certificate; empty: no lists.
  std::vector<std::string> idle_admitted;
  std::string admitted_source;
};

// CredentialMirror keeps a private, always consistent copy of a server's
// TLS files, in memory only, for gRPC to watch instead of the originals.
// gRPC re-reads the key and the certificate as two files, so replacing
// them one after the other would have it present a key that does not
// match its certificate (every handshake fails until the second file
// arrives). The mirror reads the originals (or the PEMs given inline)
// every `refresh_interval`, checks the set as CheckServingSet does, and
// only a good set becomes current, atomically: the CA, and the key with
// the certificate chain after it in one file (gRPC reads both from it, so
// never a key of one set with the certificate of another), are
// memory-backed files (memfd, sealed, modification times later than the
// last set's, which gRPC's reader compares) that gRPC reads by their
// /proc/self/fd paths; dup3(2) puts a new set in place of the last under
// the same descriptor numbers. Nothing is ever written to a file system,
// so no copy of the key outlives the process, whatever ends it. While the
// files are out of step the last good set stays; a problem two reads in a
// row find is logged once, as an ERROR naming the files that changed.
// Thread-safe.
class CredentialMirror {
 public:
  // Start checks `settings` (as MakeCredentials, and the set against
  // `self` as CheckServingSet; their errors) and makes the first set
  // current; INTERNAL if no memory file can be made. Does not watch yet
  // (see Watch).
  static absl::StatusOr<std::unique_ptr<CredentialMirror>> Start(
      const TlsSettings& settings, const SelfPollCheck& self = {});

  // Stops watching and closes the memory files. A server given
  // credentials() must be shut down first.
  ~CredentialMirror();

  // credentials names the current set's files (/proc/self/fd/N; the key
  // and the certificate are one file), re-read by gRPC every second
  // (cheap: memory, replaced only when consistent). Valid in this process
  // only.
  const Credentials& credentials() const { return credentials_; }

  // Refresh reads the originals once: true when a new good set became
  // current, false when nothing changed; the problem (the last good set
  // kept) otherwise. The watch thread calls it; tests may too.
  absl::StatusOr<bool> Refresh();

  // Watch calls Refresh every refresh interval on a thread of its own until
  // the mirror is destroyed, logging each new set (info) and each new
  // problem (warn, once until it changes). Call once.
  void Watch();

 private:
  class Impl;
  explicit CredentialMirror(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  Credentials credentials_;
};

}  // namespace cfdb::worker

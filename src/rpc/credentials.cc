#include "cfdb/worker/credentials.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/errno_text.h"
#include "core/text.h"
#include "rpc/san_match.h"
#include "rpc/tls_files.h"

namespace cfdb::worker {
namespace {

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM data found";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof buffer);
  return buffer;
}

absl::Status Bad(const TlsSettings::File& file, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(
      file.source, ": ", file.pem.empty() ? file.path : "the PEM it holds",
      ": ", std::string(problem)));
}

// NoPassphrase answers OpenSSL's request for a key's pass phrase with
// none, so an encrypted key is an error rather than a prompt on a terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

absl::StatusOr<std::string> Read(const TlsSettings::File& file) {
  if (!file.pem.empty()) return file.pem;
  std::ifstream in(file.path, std::ios::binary);
  if (!in) return Bad(file, absl::StrCat("cannot read: ", ErrnoText(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
             BIO_free);
}

// Certificates returns every certificate in `pem` (at least one).
absl::StatusOr<std::vector<X509Ptr>> Certificates(const TlsSettings::File& file,
                                                  const std::string& pem) {
  Bio bio = MemoryBio(pem);
  std::vector<X509Ptr> certificates;
  while (X509* cert =
             PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    certificates.emplace_back(cert, X509_free);
  }
  const unsigned long last = ERR_peek_last_error();
  if (!certificates.empty() && ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();  // the end of the file, after the last certificate
  } else if (certificates.empty() || last != 0) {
    return Bad(file, absl::StrCat("not a PEM certificate: ", OpenSslError()));
  }
  return certificates;
}

absl::StatusOr<KeyPtr> PrivateKey(const TlsSettings::File& file,
                                  const std::string& pem) {
  if (pem.find("ENCRYPTED") != std::string::npos) {
    return Bad(file,
               "is an encrypted key, and the worker never asks for a pass "
               "phrase: give it the key decrypted (openssl pkey -in KEY -out "
               "PLAIN), readable by the worker alone");
  }
  Bio bio = MemoryBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr),
             EVP_PKEY_free);
  if (key == nullptr) {
    return Bad(file, absl::StrCat("not a PEM private key: ", OpenSslError()));
  }
  return key;
}

std::string Where(const TlsSettings::File& file) {
  return file.pem.empty() ? file.path : file.source;
}

// VerifyChain checks that `chain`'s first certificate chains to one of
// `cas` (the others are untrusted intermediates) and is valid now; with a
// `role` ("ssl_server" or "ssl_client"), for that TLS role and against the
// CRL directory if one is set, as a handshake checks it
// (X509_STORE_CTX_set_default; gRPC wants a CRL for each CA).
absl::Status VerifyChain(const TlsSettings& settings,
                         const std::vector<X509Ptr>& cas,
                         const std::vector<X509Ptr>& chain,
                         const char* role = nullptr) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(
      X509_STORE_new(), X509_STORE_free);
  for (const X509Ptr& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  const bool crls = role != nullptr && !settings.crl_directory.empty();
  if (crls) {
    X509_LOOKUP* lookup =
        X509_STORE_add_lookup(store.get(), X509_LOOKUP_hash_dir());
    X509_LOOKUP_add_dir(lookup, settings.crl_directory.c_str(),
                        X509_FILETYPE_PEM);
    X509_STORE_set_flags(store.get(),
                         X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  }
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> untrusted(
      sk_X509_new_null(), [](STACK_OF(X509) * s) { sk_X509_free(s); });
  for (size_t i = 1; i < chain.size(); ++i) {
    sk_X509_push(untrusted.get(), chain[i].get());
  }
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(
      X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (X509_STORE_CTX_init(ctx.get(), store.get(), chain.front().get(),
                          untrusted.get()) != 1 ||
      (role != nullptr && X509_STORE_CTX_set_default(ctx.get(), role) != 1) ||
      X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    if (role != nullptr && error == X509_V_ERR_INVALID_PURPOSE) {
      return Bad(
          settings.cert,
          absl::StrCat(
              "cannot serve as a TLS ",
              std::string_view(role) == "ssl_server" ? "server" : "client",
              " certificate (", X509_verify_cert_error_string(error),
              "), and the worker presents it as the server and, polling "
              "itself, as a client: its extendedKeyUsage needs serverAuth "
              "and clientAuth"));
    }
    return Bad(
        settings.cert,
        absl::StrCat(
            "does not verify against the CA in ", Where(settings.ca),
            crls ? absl::StrCat(" with the CRLs in ", settings.crl_directory)
                 : "",
            ": ", X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
}

// Sans are a certificate's subject alternative names, by kind.
struct Sans {
  std::vector<std::string> dns, ip, uri;
};

Sans SansOf(X509* cert) {
  Sans sans;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type == GEN_DNS || name->type == GEN_URI) {
      const ASN1_IA5STRING* text = name->d.ia5;
      (name->type == GEN_DNS ? sans.dns : sans.uri)
          .emplace_back(reinterpret_cast<const char*>(text->data),
                        static_cast<size_t>(text->length));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.iPAddress;
      char text[INET6_ADDRSTRLEN] = "";
      if (ip->length == 4 || ip->length == 16) {
        inet_ntop(ip->length == 4 ? AF_INET : AF_INET6, ip->data, text,
                  sizeof text);
      }
      sans.ip.emplace_back(text);
    }
  }
  GENERAL_NAMES_free(names);
  return sans;
}

// CheckSelfPoll checks `leaf` against what the self-poll needs (`self`).
absl::Status CheckSelfPoll(const TlsSettings& settings, X509* leaf,
                           const SelfPollCheck& self) {
  const Sans sans = SansOf(leaf);
  if (const std::string problem = IdentityProblem(self.host, sans.dns, sans.ip);
      !problem.empty()) {
    // Named: the identity given, or else the certificate.
    const std::string where =
        self.host_source.empty()
            ? absl::StrCat(settings.cert.source, ": ", Where(settings.cert))
            : absl::StrCat(self.host_source, " '", self.host, "'");
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", problem, ": the worker's own self-poll verifies it by '",
        self.host,
        "', so every poll would fail its handshake and the worker could "
        "never retire on idle; give the certificate that SAN, or set "
        "--tls-identity to a DNS name it has"));
  }
  if (self.idle_admitted.empty()) return absl::OkStatus();
  std::vector<std::string> identities = sans.dns;
  identities.insert(identities.end(), sans.uri.begin(), sans.uri.end());
  for (const std::string& entry : self.idle_admitted) {
    for (const std::string& identity : identities) {
      if (AdmissionMatches(entry, identity)) return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      self.admitted_source,
      ": admits none of the identities of the worker's own certificate (",
      identities.empty() ? "it has no DNS or URI SAN"
                         : EscapedForLog(absl::StrJoin(identities, ", ")),
      ") to call Idle, so its self-poll would be refused and it could never "
      "retire on idle; add one of them to --tls-admit-observe"));
}

}  // namespace

std::string Credentials::Key() const {
  if (kind == Kind::kInsecure) return "insecure";
  return absl::StrCat("mtls\n", ca_file, "\n", cert_file, "\n", key_file, "\n",
                      identity, "\n", refresh_interval.count(), "\n",
                      crl_directory, "\n", ca_pem, "\n", cert_pem, "\n",
                      key_pem);
}

absl::StatusOr<PemSet> ReadPemSet(const TlsSettings& settings) {
  PemSet pems;
  const std::pair<const TlsSettings::File*, std::string*> files[] = {
      {&settings.ca, &pems.ca},
      {&settings.cert, &pems.cert},
      {&settings.key, &pems.key}};
  for (const auto& [file, text] : files) {
    absl::StatusOr<std::string> read = Read(*file);
    if (!read.ok()) return read.status();
    *text = *std::move(read);
  }
  return pems;
}

absl::Status CheckPemSet(const TlsSettings& settings, const PemSet& pems) {
  absl::StatusOr<std::vector<X509Ptr>> cas = Certificates(settings.ca, pems.ca);
  if (!cas.ok()) return cas.status();
  absl::StatusOr<std::vector<X509Ptr>> chain =
      Certificates(settings.cert, pems.cert);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<KeyPtr> key = PrivateKey(settings.key, pems.key);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(chain->front().get(), key->get()) != 1) {
    ERR_clear_error();
    return Bad(settings.key,
               absl::StrCat("does not belong to the certificate in ",
                            Where(settings.cert)));
  }
  return VerifyChain(settings, *cas, *chain);
}

absl::Status CheckServingSet(const TlsSettings& settings, const PemSet& pems,
                             const SelfPollCheck& self) {
  if (absl::Status s = CheckPemSet(settings, pems); !s.ok()) return s;
  absl::StatusOr<std::vector<X509Ptr>> cas = Certificates(settings.ca, pems.ca);
  absl::StatusOr<std::vector<X509Ptr>> chain =
      Certificates(settings.cert, pems.cert);
  if (!cas.ok() || !chain.ok()) return absl::InternalError("parsed once");
  for (const char* role : {"ssl_server", "ssl_client"}) {
    if (absl::Status s = VerifyChain(settings, *cas, *chain, role); !s.ok()) {
      return s;
    }
  }
  if (self.host.empty()) return absl::OkStatus();
  return CheckSelfPoll(settings, chain->front().get(), self);
}

absl::StatusOr<Credentials> MakeCredentials(const TlsSettings& settings) {
  const TlsSettings::File* files[] = {&settings.ca, &settings.cert,
                                      &settings.key};
  std::vector<std::string> missing;
  for (const TlsSettings::File* file : files) {
    if (file->path.empty() && file->pem.empty())
      missing.push_back(file->source);
  }
  if (missing.size() == 3) return Credentials::Insecure();
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mutual TLS needs a CA, a certificate and a key; missing: ",
        absl::StrJoin(missing, ", ")));
  }
  if (settings.refresh_interval < std::chrono::seconds(1)) {
    return absl::InvalidArgumentError(
        "TLS refresh interval: must be at least 1 s");
  }
  if (!settings.crl_directory.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(settings.crl_directory, error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS CRL directory: ", settings.crl_directory,
                       " is not a directory"));
    }
  }
  absl::StatusOr<PemSet> pems = ReadPemSet(settings);
  if (!pems.ok()) return pems.status();
  if (absl::Status s = CheckPemSet(settings, *pems); !s.ok()) return s;
  Credentials credentials;
  credentials.kind = Credentials::Kind::kMutualTls;
  credentials.ca_file = settings.ca.path;
  credentials.cert_file = settings.cert.path;
  credentials.key_file = settings.key.path;
  if (!settings.ca.pem.empty() || !settings.cert.pem.empty() ||
      !settings.key.pem.empty()) {
    // gRPC's file watcher has no file for an inline PEM: all three as data.
    credentials.ca_pem = pems->ca;
    credentials.cert_pem = pems->cert;
    credentials.key_pem = pems->key;
  }
  credentials.identity = settings.identity;
  credentials.refresh_interval = settings.refresh_interval;
  credentials.crl_directory = settings.crl_directory;
  return credentials;
}

}  // namespace cfdb::worker

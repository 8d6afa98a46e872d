#include "cfdb/worker/credentials.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
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
// `cas` (the others are untrusted intermediates) and is valid now.
absl::Status VerifyChain(const TlsSettings& settings,
                         const std::vector<X509Ptr>& cas,
                         const std::vector<X509Ptr>& chain) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(
      X509_STORE_new(), X509_STORE_free);
  for (const X509Ptr& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> untrusted(
      sk_X509_new_null(), [](STACK_OF(X509) * s) { sk_X509_free(s); });
  for (size_t i = 1; i < chain.size(); ++i) {
    sk_X509_push(untrusted.get(), chain[i].get());
  }
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(
      X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (X509_STORE_CTX_init(ctx.get(), store.get(), chain.front().get(),
                          untrusted.get()) != 1 ||
      X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return Bad(
        settings.cert,
        absl::StrCat("does not verify against the CA in ", Where(settings.ca),
                     ": ", X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
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

#include "cfdb/worker/credentials.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/errno_text.h"

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

// ParsePem reads `file` and parses its first PEM object of the kind `parse`
// reads (e.g. PEM_read_bio_X509); `what` names the kind in errors.
template <typename T, typename Parse, typename Free>
absl::StatusOr<std::unique_ptr<T, Free>> ParsePem(const TlsSettings::File& file,
                                                  Parse parse, Free free,
                                                  std::string_view what) {
  absl::StatusOr<std::string> pem = Read(file);
  if (!pem.ok()) return pem.status();
  Bio bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())),
          BIO_free);
  std::unique_ptr<T, Free> parsed(
      parse(bio.get(), nullptr, NoPassphrase, nullptr), free);
  if (parsed == nullptr) {
    return Bad(file, absl::StrCat("not a PEM ", std::string(what), ": ",
                                  OpenSslError()));
  }
  return parsed;
}

absl::StatusOr<X509Ptr> FirstCertificate(const TlsSettings::File& file) {
  return ParsePem<X509>(file, PEM_read_bio_X509, &X509_free, "certificate");
}

absl::StatusOr<KeyPtr> PrivateKey(const TlsSettings::File& file) {
  return ParsePem<EVP_PKEY>(file, PEM_read_bio_PrivateKey, &EVP_PKEY_free,
                            "private key");
}

}  // namespace

std::string Credentials::Key() const {
  if (kind == Kind::kInsecure) return "insecure";
  return absl::StrCat("mtls\n", ca_file, "\n", cert_file, "\n", key_file, "\n",
                      identity, "\n", refresh_interval.count());
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
  if (absl::StatusOr<X509Ptr> ca = FirstCertificate(settings.ca); !ca.ok()) {
    return ca.status();
  }
  absl::StatusOr<X509Ptr> cert = FirstCertificate(settings.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<KeyPtr> key = PrivateKey(settings.key);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return Bad(settings.key,
               absl::StrCat("does not belong to the certificate in ",
                            settings.cert.pem.empty() ? settings.cert.path
                                                      : settings.cert.source));
  }
  Credentials credentials;
  credentials.kind = Credentials::Kind::kMutualTls;
  credentials.ca_file = settings.ca.path;
  credentials.cert_file = settings.cert.path;
  credentials.key_file = settings.key.path;
  credentials.identity = settings.identity;
  credentials.refresh_interval = settings.refresh_interval;
  return credentials;
}

absl::StatusOr<Credentials> WritePemFiles(const TlsSettings& settings,
                                          Credentials credentials,
                                          const std::string& parent) {
  std::string dir = parent + "/cfdb-worker-tls-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a directory under ",
                                            parent, ": ", ErrnoText(errno)));
  }
  const std::pair<const TlsSettings::File*, std::string*> files[] = {
      {&settings.ca, &credentials.ca_file},
      {&settings.cert, &credentials.cert_file},
      {&settings.key, &credentials.key_file}};
  const char* names[] = {"ca.pem", "cert.pem", "key.pem"};
  for (int i = 0; i < 3; ++i) {
    const auto& [file, path] = files[i];
    if (file->pem.empty()) continue;
    const std::string target = absl::StrCat(dir, "/", names[i]);
    const int fd =
        open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, file->pem.data(), file->pem.size()) !=
                      static_cast<ssize_t>(file->pem.size())) {
      const std::string why = ErrnoText(errno);
      if (fd >= 0) close(fd);
      return absl::InternalError(
          absl::StrCat("cannot write ", target, ": ", why));
    }
    close(fd);
    *path = target;
  }
  return credentials;
}

}  // namespace cfdb::worker

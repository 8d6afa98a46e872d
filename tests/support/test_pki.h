// TestPki: a throw-away certificate authority for TLS tests, made with
// OpenSSL in a temporary directory.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cfdb/worker/credentials.h"

namespace cfdb::worker::test_support {

// Pem is a certificate and its key, as PEM files.
struct Pem {
  std::string cert;
  std::string key;
};

class TestPki {
 public:
  TestPki() {
    char dir[] = "/tmp/cfdb-pki-XXXXXX";
    if (mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp");
    dir_ = dir;
    ca_ = Issue("ca", "cfdb test CA", {}, nullptr, 0, 3600, true);
    other_ca_ = Issue("other-ca", "another CA", {}, nullptr, 0, 3600, true);
  }
  ~TestPki() { std::filesystem::remove_all(dir_); }

  // Issue makes a certificate for `sans` (e.g. "DNS:worker.cfdb.internal",
  // "IP:127.0.0.1") valid from `from_s` to `to_s` seconds from now, signed
  // by `issuer` (null: self-signed), with an extendedKeyUsage if `eku` is
  // set (e.g. "clientAuth"), and writes NAME.pem and NAME.key.
  Pem Issue(const std::string& name, const std::string& common_name,
            const std::vector<std::string>& sans, const Pem* issuer,
            long from_s, long to_s, bool is_ca = false,
            const std::string& eku = "") {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), ++serial_);
    X509_gmtime_adj(X509_getm_notBefore(cert), from_s);
    X509_gmtime_adj(X509_getm_notAfter(cert), to_s);
    X509_set_pubkey(cert, key);
    X509_NAME* subject = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(
        subject, "CN", MBSTRING_ASC,
        reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
    X509* issuer_cert = issuer ? ReadCert(issuer->cert) : cert;
    EVP_PKEY* issuer_key = issuer ? ReadKey(issuer->key) : key;
    X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert));
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, issuer_cert, cert, nullptr, nullptr, 0);
    AddExtension(cert, &ctx, NID_basic_constraints,
                 is_ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (!sans.empty()) {
      std::string joined;
      for (const std::string& san : sans) {
        joined += (joined.empty() ? "" : ",") + san;
      }
      AddExtension(cert, &ctx, NID_subject_alt_name, joined.c_str());
    }
    if (!eku.empty()) {
      AddExtension(cert, &ctx, NID_ext_key_usage, eku.c_str());
    }
    X509_sign(cert, issuer_key, EVP_sha256());
    Pem pem{dir_ + "/" + name + ".pem", dir_ + "/" + name + ".key"};
    Write(pem.cert, [&](FILE* f) { PEM_write_X509(f, cert); });
    Write(pem.key, [&](FILE* f) {
      PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
    });
    LogKey(pem.key);
    if (issuer) {
      X509_free(issuer_cert);
      EVP_PKEY_free(issuer_key);
    }
    X509_free(cert);
    EVP_PKEY_free(key);
    return pem;
  }

  // Leaf issues a certificate signed by the test CA, valid for an hour.
  Pem Leaf(const std::string& name, const std::vector<std::string>& sans) {
    return Issue(name, name, sans, &ca_, 0, 3600);
  }

  // Mtls returns credentials presenting `pem` and trusting the test CA.
  Credentials Mtls(const Pem& pem, std::string identity = "",
                   Duration refresh = std::chrono::seconds(60)) const {
    Credentials c;
    c.kind = Credentials::Kind::kMutualTls;
    c.ca_file = ca_.cert;
    c.cert_file = pem.cert;
    c.key_file = pem.key;
    c.identity = std::move(identity);
    c.refresh_interval = refresh;
    return c;
  }

  // Revoke writes a CRL of the test CA revoking `revoked` into a new
  // directory, named by the CA's subject hash as `openssl rehash` would
  // (HASH.r0), and returns the directory.
  std::string Revoke(const std::vector<const Pem*>& revoked) {
    const std::string dir = dir_ + "/crl-" + std::to_string(++serial_);
    std::filesystem::create_directory(dir);
    X509* ca = ReadCert(ca_.cert);
    EVP_PKEY* ca_key = ReadKey(ca_.key);
    X509_CRL* crl = X509_CRL_new();
    X509_CRL_set_version(crl, 1);
    X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca));
    ASN1_TIME* now = X509_gmtime_adj(nullptr, 0);
    ASN1_TIME* next = X509_gmtime_adj(nullptr, 3600);
    X509_CRL_set1_lastUpdate(crl, now);
    X509_CRL_set1_nextUpdate(crl, next);
    for (const Pem* pem : revoked) {
      X509* cert = ReadCert(pem->cert);
      X509_REVOKED* entry = X509_REVOKED_new();
      X509_REVOKED_set_serialNumber(entry, X509_get_serialNumber(cert));
      X509_REVOKED_set_revocationDate(entry, now);
      X509_CRL_add0_revoked(crl, entry);
      X509_free(cert);
    }
    X509_CRL_sort(crl);
    X509_CRL_sign(crl, ca_key, EVP_sha256());
    char name[32];
    snprintf(name, sizeof name, "/%08lx.r0",
             X509_NAME_hash(X509_get_subject_name(ca)));
    Write(dir + name, [&](FILE* f) { PEM_write_X509_CRL(f, crl); });
    X509_CRL_free(crl);
    ASN1_TIME_free(now);
    ASN1_TIME_free(next);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    return dir;
  }

  const Pem& ca() const { return ca_; }
  const Pem& other_ca() const { return other_ca_; }
  const std::string& dir() const { return dir_; }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  static void AddExtension(X509* cert, X509V3_CTX* ctx, int nid,
                           const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  template <typename F>
  static void Write(const std::string& path, F write) {
    FILE* f = fopen(path.c_str(), "w");
    write(f);
    fclose(f);
  }
  // LogKey appends the first line of the key's PEM body to the file
  // $CFDB_TEST_KEY_LOG names, if set: tests/support/tmp_audit.sh looks for
  // this run's keys in what is left in /tmp.
  static void LogKey(const std::string& path) {
    const char* log = std::getenv("CFDB_TEST_KEY_LOG");
    if (log == nullptr) return;
    std::istringstream pem(ReadFile(path));
    std::string line;
    std::getline(pem, line);  // -----BEGIN PRIVATE KEY-----
    std::getline(pem, line);
    std::ofstream(log, std::ios::app) << line + "\n";
  }
  static X509* ReadCert(const std::string& path) {
    FILE* f = fopen(path.c_str(), "r");
    X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
    fclose(f);
    return cert;
  }
  static EVP_PKEY* ReadKey(const std::string& path) {
    FILE* f = fopen(path.c_str(), "r");
    EVP_PKEY* key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
    fclose(f);
    return key;
  }

  std::string dir_;
  long serial_ = 0;
  Pem ca_;
  Pem other_ca_;
};

}  // namespace cfdb::worker::test_support

#include "tls_credentials.hpp"

#include "state_dir.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace tasksup::app {

namespace {

/// OpenSSL's reason for the last failure on this thread, or `fallback`.
std::string ssl_reason(const char* fallback) {
  auto code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0)
    return fallback;
  if (auto* reason = ERR_reason_error_string(code))
    return reason;
  return fallback;
}

/// Refuses to prompt for a passphrase on the terminal: tasksup's keys are
/// not encrypted, and a command must never block on a hidden prompt.
int no_passphrase(char*, int, int, void*) {
  return -1;
}

struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

using file_ptr = std::unique_ptr<std::FILE, file_closer>;

/// Opens `path` for reading, or explains why it cannot be.
expected<file_ptr> open_for_reading(const std::string& path,
                                    const std::string& what) {
  file_ptr f{std::fopen(path.c_str(), "rb")};
  if (!f)
    return error{
      path, {}, "cannot read the " + what + ": " + std::strerror(errno)};
  return f;
}

} // namespace

node_credentials insecure_credentials() {
  node_credentials out;
  out.insecure = true;
  return out;
}

node_credentials client_credentials_in(const std::string& dir) {
  node_credentials out;
  out.ca_file = dir + "/" + cert_file::ca_certificate;
  out.certificate_file = dir + "/" + cert_file::client_certificate;
  out.key_file = dir + "/" + cert_file::client_key;
  return out;
}

node_credentials node_credentials_in(const std::string& dir) {
  node_credentials out;
  out.ca_file = dir + "/" + cert_file::ca_certificate;
  out.certificate_file = dir + "/" + cert_file::node_certificate;
  out.key_file = dir + "/" + cert_file::node_key;
  return out;
}

std::string client_certs_dir(const std::string& flag,
                             const std::string& fallback) {
  if (!flag.empty())
    return flag;
  if (auto* env = std::getenv("TASKSUP_CERTS"); env && *env != '\0')
    return env;
  return fallback;
}

std::string node_certs_dir(const std::string& flag,
                           const std::string& state_dir) {
  return flag.empty() ? state_dir + "/certs" : flag;
}

node_credentials joining_credentials(const std::string& flag, bool insecure) {
  if (insecure)
    return insecure_credentials();
  return node_credentials_in(
    client_certs_dir(flag, default_state_dir() + "/certs"));
}

std::optional<error> check_credentials(const node_credentials& creds) {
  if (creds.insecure)
    return std::nullopt;
  auto ca = open_for_reading(creds.ca_file, "CA certificate");
  if (!ca)
    return ca.error();
  {
    X509* x = PEM_read_X509(ca->get(), nullptr, no_passphrase, nullptr);
    if (x == nullptr)
      return error{creds.ca_file,
                   {},
                   "not a PEM certificate (" +
                     ssl_reason("no certificate found") + ")"};
    X509_free(x);
  }
  auto cert = open_for_reading(creds.certificate_file, "certificate");
  if (!cert)
    return cert.error();
  X509* x = PEM_read_X509(cert->get(), nullptr, no_passphrase, nullptr);
  if (x == nullptr)
    return error{creds.certificate_file,
                 {},
                 "not a PEM certificate (" +
                   ssl_reason("no certificate found") + ")"};
  std::unique_ptr<X509, decltype(&X509_free)> x_guard{x, X509_free};
  auto key = open_for_reading(creds.key_file, "private key");
  if (!key)
    return key.error();
  EVP_PKEY* k =
    PEM_read_PrivateKey(key->get(), nullptr, no_passphrase, nullptr);
  if (k == nullptr)
    return error{creds.key_file,
                 {},
                 "not an unencrypted PEM private key (" +
                   ssl_reason("no key found") + ")"};
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k_guard{k, EVP_PKEY_free};
  if (X509_check_private_key(x, k) != 1) {
    ERR_clear_error();
    return error{creds.key_file,
                 {},
                 "this private key does not belong to the certificate " +
                   creds.certificate_file};
  }
  return std::nullopt;
}

std::string client_certs_help() {
  return "Connections are mutual TLS: the command shows the node a client "
         "certificate signed by the node's CA and accepts only a node "
         "certificate signed by it. Its files (ca.crt, client.crt, "
         "client.key) are in --certs DIR if given, else in $TASKSUP_CERTS "
         "if set, else in <state dir>/certs, where a node started without "
         "--certs creates them. --insecure talks plain TCP to a node started "
         "with --insecure.";
}

} // namespace tasksup::app

#include "certs.hpp"

#include "tls_credentials.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <string_view>

namespace tasksup::app {

namespace {

template<class T, void (*Free)(T*)>
struct ossl_deleter {
  void operator()(T* p) const { Free(p); }
};

using pkey_ptr =
  std::unique_ptr<EVP_PKEY, ossl_deleter<EVP_PKEY, EVP_PKEY_free>>;
using x509_ptr = std::unique_ptr<X509, ossl_deleter<X509, X509_free>>;
using bn_ptr = std::unique_ptr<BIGNUM, ossl_deleter<BIGNUM, BN_free>>;
using bio_ptr = std::unique_ptr<BIO, ossl_deleter<BIO, BIO_free_all>>;

error ssl_failure(const std::string& where, const std::string& what) {
  return error{where, {}, what + ": " + ssl_error_text()};
}

/// A fresh EC P-256 key.
expected<pkey_ptr> make_key(const std::string& where) {
  pkey_ptr key{EVP_EC_gen("P-256")};
  if (!key)
    return ssl_failure(where, "cannot create an EC P-256 key");
  return key;
}

/// `hostname`, for certificate names.
std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

/// The effective user's name (its uid when it has none).
std::string user_name() {
  auto uid = ::geteuid();
  if (auto* pw = ::getpwuid(uid); pw != nullptr && pw->pw_name != nullptr)
    return pw->pw_name;
  return "uid " + std::to_string(uid);
}

/// A short random tag, so that two CAs never share a name.
std::string random_tag() {
  unsigned char bytes[4];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    std::random_device rd;
    for (auto& b : bytes)
      b = static_cast<unsigned char>(rd());
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

/// What a certificate is for.
enum class cert_role { ca, node, client };

/// Adds one X.509v3 extension written as in openssl.cnf.
bool add_extension(X509* cert, X509V3_CTX& ctx, int nid, const char* value) {
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr)
    return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

/// A certificate for `key` named `common_name`, signed by `issuer_key`
/// (self-signed when `issuer` is null).
expected<x509_ptr> make_cert(const std::string& where, cert_role role,
                             const std::string& common_name, EVP_PKEY* key,
                             X509* issuer, EVP_PKEY* issuer_key, int days) {
  x509_ptr cert{X509_new()};
  if (!cert)
    return ssl_failure(where, "cannot create a certificate");
  X509* x = cert.get();
  // Version 3; a random positive serial of 159 bits (RFC 5280 allows 20
  // octets; random serials keep two certificates of one CA apart).
  bn_ptr serial{BN_new()};
  if (X509_set_version(x, 2) != 1 || !serial ||
      BN_rand(serial.get(), 159, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x)) == nullptr)
    return ssl_failure(where, "cannot set the serial number");
  // Valid from five minutes ago, for clocks slightly behind.
  if (X509_gmtime_adj(X509_getm_notBefore(x), -300) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x), static_cast<long>(days) * 86400) ==
        nullptr)
    return ssl_failure(where, "cannot set the validity");
  X509_NAME* name = X509_get_subject_name(x);
  auto add_name = [&](const char* field, const std::string& value) {
    return X509_NAME_add_entry_by_txt(
             name, field, MBSTRING_UTF8,
             reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1,
             0) == 1;
  };
  if (!add_name("O", "tasksup") || !add_name("CN", common_name))
    return ssl_failure(where, "cannot set the subject name");
  X509* signer = issuer != nullptr ? issuer : x;
  if (X509_set_issuer_name(x, X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(x, key) != 1)
    return ssl_failure(where, "cannot set the issuer or public key");
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, x, nullptr, nullptr, 0);
  bool ok = true;
  switch (role) {
    case cert_role::ca:
      ok = add_extension(x, ctx, NID_basic_constraints,
                         "critical,CA:TRUE,pathlen:0") &&
           add_extension(x, ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
      break;
    case cert_role::node: {
      // A node serves the CLI and, as a worker, connects to a coordinator.
      auto san = "DNS:localhost,IP:127.0.0.1,IP:::1,DNS:" + host_name();
      ok = add_extension(x, ctx, NID_basic_constraints, "critical,CA:FALSE") &&
           add_extension(x, ctx, NID_key_usage, "critical,digitalSignature") &&
           add_extension(x, ctx, NID_ext_key_usage, "serverAuth,clientAuth") &&
           add_extension(x, ctx, NID_subject_alt_name, san.c_str());
      break;
    }
    case cert_role::client:
      ok = add_extension(x, ctx, NID_basic_constraints, "critical,CA:FALSE") &&
           add_extension(x, ctx, NID_key_usage, "critical,digitalSignature") &&
           add_extension(x, ctx, NID_ext_key_usage, "clientAuth");
      break;
  }
  ok = ok && add_extension(x, ctx, NID_subject_key_identifier, "hash") &&
       add_extension(x, ctx, NID_authority_key_identifier, "keyid:always");
  if (!ok)
    return ssl_failure(where, "cannot add the certificate's extensions");
  if (X509_sign(x, issuer_key, EVP_sha256()) <= 0)
    return ssl_failure(where, "cannot sign the certificate");
  return cert;
}

/// PEM text of a key (PKCS#8, unencrypted) or a certificate.
expected<std::string> to_pem(const std::string& where, EVP_PKEY* key,
                             X509* cert) {
  bio_ptr bio{BIO_new(BIO_s_mem())};
  if (!bio)
    return ssl_failure(where, "cannot allocate a buffer");
  int ok = key != nullptr
             ? PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0,
                                        nullptr, nullptr)
             : PEM_write_bio_X509(bio.get(), cert);
  if (ok != 1)
    return ssl_failure(where, "cannot encode it as PEM");
  char* data = nullptr;
  auto len = BIO_get_mem_data(bio.get(), &data);
  return std::string{data, static_cast<std::size_t>(len)};
}

/// Creates `dir` and its missing parents with mode 0700; an existing `dir`
/// must be a directory that only its owner can enter.
std::optional<error> make_private_dir(const std::string& dir) {
  if (dir.empty())
    return error{"certs", {}, "no directory given"};
  std::string path;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    auto next = dir.find('/', pos + 1);
    path = dir.substr(0, next);
    pos = next;
    if (path.empty() || path == "/")
      continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      return error{path,
                   {},
                   std::string{"cannot create the directory: "} +
                     std::strerror(errno)};
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return error{dir, {}, std::string{"cannot read: "} + std::strerror(errno)};
  if (!S_ISDIR(st.st_mode))
    return error{dir, {}, "not a directory"};
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    return error{dir,
                 {},
                 std::string{"other users can enter this directory (mode "} +
                   mode +
                   "): keys go into a directory only its owner can use; "
                   "chmod 700 it or choose a new one"};
  }
  return std::nullopt;
}

/// Writes `content` to `dir/name` with `mode`: into a temporary file first,
/// synced, then linked into place (or renamed over the old one with
/// `replace`), so that no reader sees a partial file.
std::optional<error> write_file(const std::string& dir, const char* name,
                                const std::string& content, mode_t mode,
                                bool replace) {
  auto path = dir + "/" + name;
  auto tmp = dir + "/." + name + ".tmp-" + std::to_string(::getpid()) + "-" +
             random_tag();
  int fd = ::open(tmp.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0)
    return error{
      path, {}, std::string{"cannot create: "} + std::strerror(errno)};
  auto fail = [&](const char* what) {
    auto saved = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return error{path, {}, std::string{what} + ": " + std::strerror(saved)};
  };
  // The umask must not loosen or tighten what is asked for.
  if (::fchmod(fd, mode) != 0)
    return fail("cannot set its mode");
  std::size_t done = 0;
  while (done < content.size()) {
    auto n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return fail("cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0)
    return fail("cannot sync");
  ::close(fd);
  int rc = replace ? ::rename(tmp.c_str(), path.c_str())
                   : ::link(tmp.c_str(), path.c_str());
  auto saved = errno;
  ::unlink(tmp.c_str());
  if (rc != 0)
    return error{path,
                 {},
                 saved == EEXIST
                   ? std::string{"exists already (pass --force to replace "
                                 "it)"}
                   : std::string{"cannot put in place: "} +
                       std::strerror(saved)};
  return std::nullopt;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

constexpr const char* all_files[] = {
  cert_file::ca_key,     cert_file::ca_certificate,
  cert_file::node_key,   cert_file::node_certificate,
  cert_file::client_key, cert_file::client_certificate,
};

} // namespace

expected<std::vector<std::string>> init_certs(const std::string& dir,
                                              const certs_init_options& opts) {
  if (opts.ca_days <= 0 || opts.leaf_days <= 0)
    return error{"certs", {}, "validity must be at least one day"};
  if (!opts.force) {
    std::string present;
    for (auto* name : all_files)
      if (exists(dir + "/" + name))
        present += (present.empty() ? "" : ", ") + std::string{name};
    if (!present.empty())
      return error{dir,
                   {},
                   "refusing to overwrite " + present +
                     " (pass --force to replace every file)"};
  }
  if (auto err = make_private_dir(dir))
    return *err;
  // Everything is made in memory first: a failure writes nothing.
  auto ca_key = make_key(dir + "/" + cert_file::ca_key);
  auto node_key = make_key(dir + "/" + cert_file::node_key);
  auto client_key = make_key(dir + "/" + cert_file::client_key);
  for (auto* k : {&ca_key, &node_key, &client_key})
    if (!*k)
      return k->error();
  auto host = host_name();
  auto ca = make_cert(dir + "/" + cert_file::ca_certificate, cert_role::ca,
                      "tasksup CA " + host + " " + random_tag(), ca_key->get(),
                      nullptr, ca_key->get(), opts.ca_days);
  if (!ca)
    return ca.error();
  auto node =
    make_cert(dir + "/" + cert_file::node_certificate, cert_role::node,
              "tasksup node " + host, node_key->get(), ca->get(), ca_key->get(),
              opts.leaf_days);
  if (!node)
    return node.error();
  auto client =
    make_cert(dir + "/" + cert_file::client_certificate, cert_role::client,
              "tasksup client " + user_name() + "@" + host, client_key->get(),
              ca->get(), ca_key->get(), opts.leaf_days);
  if (!client)
    return client.error();
  struct output {
    const char* name;
    EVP_PKEY* key;
    X509* cert;
  };
  // Keys first: a certificate is never in place without its key.
  const output outputs[] = {
    {cert_file::ca_key, ca_key->get(), nullptr},
    {cert_file::node_key, node_key->get(), nullptr},
    {cert_file::client_key, client_key->get(), nullptr},
    {cert_file::ca_certificate, nullptr, ca->get()},
    {cert_file::node_certificate, nullptr, node->get()},
    {cert_file::client_certificate, nullptr, client->get()},
  };
  std::vector<std::string> written;
  for (auto& o : outputs) {
    auto path = dir + "/" + o.name;
    auto pem = to_pem(path, o.key, o.cert);
    if (!pem)
      return pem.error();
    mode_t mode = o.key != nullptr ? 0600 : 0644;
    if (auto err = write_file(dir, o.name, *pem, mode, opts.force))
      return *err;
    written.push_back(path);
  }
  // The names in the directory survive a crash, too.
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return written;
}

expected<node_certs_state> ensure_node_certs(const std::string& dir) {
  bool any = false;
  for (auto* name : all_files)
    any = any || exists(dir + "/" + name);
  if (!any) {
    auto made = init_certs(dir, certs_init_options{});
    if (!made)
      return made.error();
    return node_certs_state::created;
  }
  for (auto* name : {cert_file::ca_certificate, cert_file::node_certificate,
                     cert_file::node_key})
    if (!exists(dir + "/" + name))
      return error{dir + "/" + name,
                   {},
                   "missing, while other certificate files are in " + dir +
                     " (recreate them all with `tasksup certs init --force " +
                     dir + "`)"};
  return node_certs_state::present;
}

std::vector<std::string> exposed_cert_files(const std::string& dir) {
  std::vector<std::string> out;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    out.push_back(dir);
  for (auto* name :
       {cert_file::ca_key, cert_file::node_key, cert_file::client_key}) {
    auto path = dir + "/" + name;
    if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
      out.push_back(path);
  }
  return out;
}

std::string ssl_error_text() {
  auto code = ERR_get_error();
  ERR_clear_error();
  if (code == 0)
    return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  return buf;
}

} // namespace tasksup::app

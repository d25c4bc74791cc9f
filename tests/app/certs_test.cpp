#include "certs.hpp"
#include "tls_credentials.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

using namespace tasksup::app;

namespace {

using tasksup::test::mode_of;
using tasksup::test::temp_dir;

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

using x509_ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

x509_ptr load_cert(const std::string& path) {
  auto* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  x509_ptr out{PEM_read_X509(f, nullptr, nullptr, nullptr), X509_free};
  std::fclose(f);
  REQUIRE(out);
  return out;
}

pkey_ptr load_key(const std::string& path) {
  auto* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  pkey_ptr out{PEM_read_PrivateKey(f, nullptr, nullptr, nullptr),
               EVP_PKEY_free};
  std::fclose(f);
  REQUIRE(out);
  return out;
}

/// Whether `cert` verifies against the CA certificate `ca` for `purpose`
/// (X509_PURPOSE_SSL_SERVER or _CLIENT), with OpenSSL's own verifier.
bool verifies(const std::string& ca, const std::string& cert, int purpose) {
  auto ca_cert = load_cert(ca);
  auto leaf = load_cert(cert);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store{
    X509_STORE_new(), X509_STORE_free};
  REQUIRE(X509_STORE_add_cert(store.get(), ca_cert.get()) == 1);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx{
    X509_STORE_CTX_new(), X509_STORE_CTX_free};
  REQUIRE(X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr) ==
          1);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  return X509_verify_cert(ctx.get()) == 1;
}

std::string serial_of(const std::string& cert) {
  auto x = load_cert(cert);
  auto* bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(x.get()), nullptr);
  REQUIRE(bn != nullptr);
  auto* hex = BN_bn2hex(bn);
  std::string out{hex};
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

} // namespace

TEST_CASE("certs init creates a CA and a node and a client certificate "
          "signed by it, private to the user") {
  temp_dir tmp;
  auto dir = tmp.path + "/new/certs";
  auto written = init_certs(dir, {});
  INFO((written ? "" : written.error().to_string()));
  REQUIRE(written);
  CHECK(written->size() == 6);
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(tmp.path + "/new") == 0700);
  for (auto* key : {"ca.key", "node.key", "client.key"})
    CHECK(mode_of(dir + "/" + key) == 0600);
  for (auto* cert : {"ca.crt", "node.crt", "client.crt"})
    CHECK(mode_of(dir + "/" + cert) == 0644);
  // Nothing else (no temporary file) is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator{dir},
                      std::filesystem::directory_iterator{}) == 6);

  auto ca = dir + "/ca.crt";
  CHECK(verifies(ca, dir + "/node.crt", X509_PURPOSE_SSL_SERVER));
  // A worker node connects to a coordinator with its node certificate.
  CHECK(verifies(ca, dir + "/node.crt", X509_PURPOSE_SSL_CLIENT));
  CHECK(verifies(ca, dir + "/client.crt", X509_PURPOSE_SSL_CLIENT));
  // A client's certificate cannot pose as a node.
  CHECK_FALSE(verifies(ca, dir + "/client.crt", X509_PURPOSE_SSL_SERVER));

  for (auto* name : {"node", "client", "ca"}) {
    INFO(name);
    auto cert = load_cert(dir + "/" + name + ".crt");
    auto key = load_key(dir + "/" + name + ".key");
    CHECK(X509_check_private_key(cert.get(), key.get()) == 1);
    CHECK(EVP_PKEY_get_base_id(key.get()) == EVP_PKEY_EC);
    char curve[64] = {};
    std::size_t len = 0;
    REQUIRE(EVP_PKEY_get_utf8_string_param(key.get(), "group", curve,
                                           sizeof curve, &len) == 1);
    CHECK(std::string{curve} == "prime256v1");
    CHECK(X509_get_signature_nid(cert.get()) == NID_ecdsa_with_SHA256);
    // Valid now, and for more than a year.
    CHECK(X509_cmp_current_time(X509_get0_notBefore(cert.get())) < 0);
    CHECK(X509_cmp_time(X509_get0_notAfter(cert.get()), nullptr) > 0);
  }
  auto ca_cert = load_cert(ca);
  CHECK(X509_check_ca(ca_cert.get()) == 1);
  auto node_cert = load_cert(dir + "/node.crt");
  CHECK(X509_check_ca(node_cert.get()) == 0);
  // Random serial numbers: no two alike.
  CHECK(serial_of(ca) != serial_of(dir + "/node.crt"));
  CHECK(serial_of(dir + "/node.crt") != serial_of(dir + "/client.crt"));
  // The credentials load as a node's and as a client's.
  CHECK_FALSE(check_credentials(node_credentials_in(dir)));
  CHECK_FALSE(check_credentials(client_credentials_in(dir)));
}

TEST_CASE("certs init refuses to overwrite unless forced") {
  temp_dir tmp;
  auto dir = tmp.path + "/certs";
  REQUIRE(init_certs(dir, {}));
  auto key_before = slurp(dir + "/ca.key");
  auto serial_before = serial_of(dir + "/node.crt");
  auto again = init_certs(dir, {});
  REQUIRE_FALSE(again);
  auto text = again.error().to_string();
  CHECK(text.find("refusing to overwrite") != std::string::npos);
  CHECK(text.find("ca.key") != std::string::npos);
  CHECK(text.find("--force") != std::string::npos);
  CHECK(slurp(dir + "/ca.key") == key_before);
  // One file is enough to refuse, and nothing is written.
  temp_dir tmp2;
  auto one = tmp2.path + "/certs";
  REQUIRE(::mkdir(one.c_str(), 0700) == 0);
  std::ofstream{one + "/client.crt"} << "mine";
  auto refused = init_certs(one, {});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().to_string().find("client.crt") != std::string::npos);
  CHECK(slurp(one + "/client.crt") == "mine");
  CHECK_FALSE(std::filesystem::exists(one + "/ca.key"));

  certs_init_options force;
  force.force = true;
  auto forced = init_certs(dir, force);
  INFO((forced ? "" : forced.error().to_string()));
  REQUIRE(forced);
  CHECK(slurp(dir + "/ca.key") != key_before);
  CHECK(serial_of(dir + "/node.crt") != serial_before);
  CHECK(mode_of(dir + "/ca.key") == 0600);
  CHECK(verifies(dir + "/ca.crt", dir + "/node.crt", X509_PURPOSE_SSL_SERVER));
}

TEST_CASE("certificates of another CA do not verify against this one") {
  temp_dir tmp;
  REQUIRE(init_certs(tmp.path + "/a", {}));
  REQUIRE(init_certs(tmp.path + "/b", {}));
  CHECK_FALSE(verifies(tmp.path + "/a/ca.crt", tmp.path + "/b/client.crt",
                       X509_PURPOSE_SSL_CLIENT));
  CHECK_FALSE(verifies(tmp.path + "/b/ca.crt", tmp.path + "/a/node.crt",
                       X509_PURPOSE_SSL_SERVER));
  // A key of one set does not pass with the certificate of the other.
  node_credentials mixed = client_credentials_in(tmp.path + "/a");
  mixed.key_file = tmp.path + "/b/client.key";
  auto err = check_credentials(mixed);
  REQUIRE(err);
  CHECK(err->where == mixed.key_file);
  CHECK(err->what.find("does not belong") != std::string::npos);
}

TEST_CASE("certs init refuses a directory other users can enter") {
  temp_dir tmp;
  auto dir = tmp.path + "/open";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  auto r = init_certs(dir, {});
  REQUIRE_FALSE(r);
  CHECK(r.error().where == dir);
  CHECK(r.error().what.find("0755") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/ca.key"));
}

TEST_CASE("a node's certificate directory is created on first start, kept "
          "after, and never completed silently") {
  temp_dir tmp;
  auto dir = tmp.path + "/state/certs";
  auto first = ensure_node_certs(dir);
  REQUIRE(first);
  CHECK(*first == node_certs_state::created);
  auto serial = serial_of(dir + "/node.crt");
  auto second = ensure_node_certs(dir);
  REQUIRE(second);
  CHECK(*second == node_certs_state::present);
  CHECK(serial_of(dir + "/node.crt") == serial);
  CHECK(exposed_cert_files(dir).empty());
  // Without a client certificate the node still starts (its own files are
  // there); without its key it does not.
  std::filesystem::remove(dir + "/client.key");
  CHECK(ensure_node_certs(dir));
  std::filesystem::remove(dir + "/node.key");
  auto broken = ensure_node_certs(dir);
  REQUIRE_FALSE(broken);
  CHECK(broken.error().where == dir + "/node.key");
  CHECK(broken.error().what.find("certs init --force") != std::string::npos);
  // A key other users may read is reported.
  REQUIRE(::chmod((dir + "/ca.key").c_str(), 0644) == 0);
  auto exposed = exposed_cert_files(dir);
  REQUIRE(exposed.size() == 1);
  CHECK(exposed.front() == dir + "/ca.key");
}

#include "tls_server_context.hpp"

#include "certs.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <spdlog/spdlog.h>

namespace tasksup::app {

namespace {

/// Longest certificate chain a peer may send during the handshake (ours
/// are under 1 KiB each); bounds what a handshaking connection can make the
/// node buffer.
constexpr long max_peer_cert_list_bytes = 32 * 1024;

} // namespace

expected<tls_server_context>
make_tls_server_context(const node_credentials& creds) {
  if (auto err = check_credentials(creds))
    return *err;
  tls_server_context ctx{SSL_CTX_new(TLS_server_method()), SSL_CTX_free};
  if (!ctx)
    return error{"tls", {}, "cannot create a TLS context: " + ssl_error_text()};
  auto* c = ctx.get();
  auto fail = [](const std::string& file, const std::string& what) {
    return error{file, {}, what + ": " + ssl_error_text()};
  };
  if (SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) != 1)
    return error{"tls", {}, "cannot require TLS 1.2: " + ssl_error_text()};
  if (SSL_CTX_use_certificate_chain_file(c, creds.certificate_file.c_str()) !=
      1)
    return fail(creds.certificate_file, "cannot load the node certificate");
  if (SSL_CTX_use_PrivateKey_file(c, creds.key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1)
    return fail(creds.key_file, "cannot load the node key");
  if (SSL_CTX_check_private_key(c) != 1)
    return fail(creds.key_file, "the key does not match the certificate");
  // Trust the node's own CA and nothing else (no system store).
  if (SSL_CTX_load_verify_locations(c, creds.ca_file.c_str(), nullptr) != 1)
    return fail(creds.ca_file, "cannot load the CA certificate");
  if (auto* names = SSL_load_client_CA_file(creds.ca_file.c_str()))
    SSL_CTX_set_client_CA_list(c, names);
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  // Client certificate, then the CA.
  SSL_CTX_set_verify_depth(c, 2);
  SSL_CTX_set_max_cert_list(c, max_peer_cert_list_bytes);
  // No renegotiation (a peer could make the node redo handshakes), no
  // compression, no session resumption: every connection proves itself.
  SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                           SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  // Forward secrecy and authenticated encryption only (TLS 1.2; TLS 1.3's
  // suites all qualify). CAF's client offers these.
  if (SSL_CTX_set_cipher_list(c, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1)
    return error{"tls", {}, "cannot set the cipher list: " + ssl_error_text()};
  // The guard writes from a buffer it trims from the front and reads into
  // bounded buffers; idle connections give their record buffers back.
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE |
                        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                        SSL_MODE_RELEASE_BUFFERS);
  return ctx;
}

expected<tls_server_context> front_door_tls(const std::string& certs_flag,
                                            const std::string& state_dir,
                                            bool insecure) {
  if (insecure)
    return tls_server_context{};
  auto dir = node_certs_dir(certs_flag, state_dir);
  if (certs_flag.empty()) {
    auto state = ensure_node_certs(dir);
    if (!state)
      return state.error();
    if (*state == node_certs_state::created)
      spdlog::info("created a CA, a node and a client certificate in {} "
                   "(readable by this user only; `tasksup` commands run by "
                   "this user find them there)",
                   dir);
  }
  auto ctx = make_tls_server_context(node_credentials_in(dir));
  if (!ctx) {
    auto err = ctx.error();
    if (!certs_flag.empty())
      err.what += " (create the certificates with `tasksup certs init " +
                  certs_flag + "`)";
    return err;
  }
  for (auto& path : exposed_cert_files(dir))
    spdlog::warn("{} can be read by other users: anyone who can read the "
                 "keys in {} can run commands on this node",
                 path, dir);
  spdlog::info("mutual TLS with the certificates in {}", dir);
  return ctx;
}

} // namespace tasksup::app

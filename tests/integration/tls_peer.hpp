#pragma once

// Peers of a node's TLS front door for tests: a raw TLS client written with
// OpenSSL (to send BASP frames or garbage inside a real TLS connection, and
// to see whether the node refuses a certificate), the bytes of a real
// ClientHello, and a CAF actor system that connects through CAF's OpenSSL
// module with a given set of certificate files.

#include "tasksup_child.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/remote_connect.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/timespan.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <optional>
#include <stdexcept>
#include <string>

namespace tasksup::test {

/// A CA certificate, and a certificate and key to show (PEM files).
struct tls_files {
  std::string ca;
  std::string certificate;
  std::string key;
};

/// The client files of a certificate directory (`tasksup certs init`).
inline tls_files client_files(const std::string& dir) {
  return {dir + "/ca.crt", dir + "/client.crt", dir + "/client.key"};
}

/// The default certificate directory of a node a test started in `dir`.
inline std::string node_certs(const scratch& dir) {
  return dir / "state/certs";
}

/// A TCP connection to 127.0.0.1:`port` (blocking), or -1.
inline int loopback_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline void set_receive_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/// A TLS client connection to a node on loopback, made with OpenSSL
/// directly: TLS 1.2 by default (as CAF's client), so that a refused
/// certificate fails the handshake itself.
class tls_client {
public:
  tls_client(int port, const std::optional<tls_files>& files,
             int max_version = TLS1_2_VERSION) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr)
      throw std::runtime_error("SSL_CTX_new failed");
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx_, max_version);
    if (files) {
      if (SSL_CTX_use_certificate_chain_file(ctx_,
                                             files->certificate.c_str()) != 1 ||
          SSL_CTX_use_PrivateKey_file(ctx_, files->key.c_str(),
                                      SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_load_verify_locations(ctx_, files->ca.c_str(), nullptr) != 1)
        throw std::runtime_error("cannot load the test's TLS files");
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    }
    // OpenSSL writes without MSG_NOSIGNAL: a write to a connection the node
    // has closed must fail, not kill the test.
    ::signal(SIGPIPE, SIG_IGN);
    fd_ = loopback_connect(port);
    if (fd_ < 0)
      throw std::runtime_error("cannot connect to the node");
    set_receive_timeout(fd_, std::chrono::seconds{10});
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    ERR_clear_error();
    handshake_ok_ = SSL_connect(ssl_) == 1;
    ERR_clear_error();
  }

  tls_client(const tls_client&) = delete;
  tls_client& operator=(const tls_client&) = delete;

  ~tls_client() {
    if (ssl_ != nullptr)
      SSL_free(ssl_);
    if (fd_ >= 0)
      ::close(fd_);
    if (ctx_ != nullptr)
      SSL_CTX_free(ctx_);
  }

  /// Whether the TLS handshake completed (with TLS 1.2, the node has
  /// accepted our certificate by then).
  bool handshake_ok() const noexcept { return handshake_ok_; }

  /// Sends `bytes` inside TLS; false when the connection is broken.
  bool send(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      ERR_clear_error();
      int n = SSL_write(ssl_, bytes.data() + done,
                        static_cast<int>(bytes.size() - done));
      if (n <= 0)
        return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Whether the node closed the connection within `limit` (what it sends
  /// meanwhile, such as CAF's handshake, is read and dropped).
  bool closed_by_node(std::chrono::milliseconds limit) {
    if (!handshake_ok_)
      return true;
    set_receive_timeout(fd_, std::chrono::milliseconds{100});
    return eventually(
      [&] {
        char buf[4096];
        ERR_clear_error();
        int n = SSL_read(ssl_, buf, sizeof buf);
        if (n > 0)
          return false;
        int e = SSL_get_error(ssl_, n);
        ERR_clear_error();
        return e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
      },
      limit);
  }

private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool handshake_ok_ = false;
};

/// The bytes of a real TLS ClientHello (what a TLS client sends first).
inline std::string client_hello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_connect(ssl); // wants to read the ServerHello next
  char* data = nullptr;
  auto len = BIO_get_mem_data(out, &data);
  std::string hello{data, static_cast<std::size_t>(len)};
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return hello;
}

/// Prepares `cfg` as a CAF client of a node: the protocol, the middleman
/// with heartbeats but without CAF's connection timeout (as tasksup's own
/// clients; see remote_connect.hpp) and, with `files`, CAF's OpenSSL module
/// with them.
inline void configure_caf_client(caf::actor_system_config& cfg,
                                 const std::optional<tls_files>& files) {
  register_protocol(cfg);
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::seconds{1}});
  disable_connection_timeout(cfg);
  if (files) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = files->certificate;
    cfg.openssl_key = files->key;
    cfg.openssl_cafile = files->ca;
  }
}

/// The door of the node at 127.0.0.1:`port`, for an actor system set up by
/// `configure_caf_client` (with TLS when it loaded CAF's OpenSSL module);
/// connecting takes at most 10 s.
inline caf::expected<caf::actor> caf_connect(caf::actor_system& sys, int port) {
  auto connector = sys.has_openssl_manager()
                     ? sys.openssl_manager().actor_handle()
                     : sys.middleman().actor_handle();
  return connect_within(connector, "127.0.0.1",
                        static_cast<std::uint16_t>(port),
                        caf::timespan{std::chrono::seconds{10}});
}

} // namespace tasksup::test

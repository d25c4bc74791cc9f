#pragma once

#include "peer_directory.hpp"

// The node's network front: a small acceptor that owns the public listening
// socket and relays each connection to CAF's middleman through a socket pair,
// reading the BASP frame headers of what the peer sends on the way. CAF 0.17
// sizes its read buffer to a frame's announced payload length before any of
// it arrives, never times out a frame that stops halfway and has no cap on
// connections; the guard adds those three limits and leaves BASP itself to
// CAF (the bytes pass unchanged). With a TLS context it also terminates
// mutual TLS: a peer without a certificate signed by the node's CA is
// refused during the handshake, before CAF has a connection, and the frame
// checks apply to the decrypted stream. See README "Design: the front door".

#include "tls_server_context.hpp"

#include "tasksup/supervisor/wire_limits.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace tasksup::app {

/// Connections a node's front door keeps open at most, by default.
inline constexpr std::size_t default_max_connections = 512;

/// Limits of the connection guard, with their defaults.
struct connection_guard_options {
  /// Address to listen on.
  std::string host = "127.0.0.1";
  /// Port to listen on; 0 picks a free one.
  std::uint16_t port = 0;
  /// Open connections at most; one more closes one: a connection that has
  /// not finished its handshakes first, then a client's, a worker node's
  /// (node certificate) last; among those, the one whose peer has been
  /// silent longest. Also capped by the descriptor limit.
  std::size_t max_connections = default_max_connections;
  /// Largest BASP payload a peer may announce.
  std::uint32_t max_payload_bytes = wire::max_message_bytes;
  /// A frame begun and not completed, with no byte from the peer for this
  /// long, closes the connection; so does a TLS handshake not completed
  /// this long after the connection was accepted.
  std::chrono::milliseconds frame_timeout{10000};
  /// A connection whose peer sends nothing at all (CAF peers send a
  /// heartbeat every second) for this long is closed.
  std::chrono::milliseconds idle_timeout{30000};
  /// Mutual TLS (see tls_server_context.hpp); null: plain TCP, which start()
  /// logs as a warning.
  tls_server_context tls;
  /// Seconds between two log lines about refused handshakes: the first
  /// refusal is logged at once, later ones are counted and summed up at most
  /// this often, so a flood cannot fill the disk.
  std::chrono::seconds refusal_log_interval{10};
  /// With TLS: told, on the guard's thread, of each client that completes
  /// its BASP client handshake: that frame's payload (which begins with the
  /// client's CAF node id) and the certificate the client showed, before
  /// the handshake reaches CAF. How the node names the client of a request
  /// and knows whether it may join as a worker (see peer_directory.hpp).
  std::function<void(const std::string& handshake,
                     const peer_certificate& cert)>
    on_client;
};

/// Counters of what the guard refused, for the node's log and tests.
struct connection_guard_stats {
  std::size_t accepted = 0;
  std::size_t oversized = 0;
  std::size_t timed_out = 0;
  std::size_t evicted = 0;
  /// TLS handshakes that failed: no certificate, one not signed by the
  /// node's CA, not TLS at all, an oversized record. (A handshake that
  /// stalls counts as timed out.)
  std::size_t refused_handshakes = 0;
  /// Connections closed because no descriptor number for CAF was free of
  /// its quarantine (see connection_guard.cpp; needs thousands of new
  /// connections within seconds).
  std::size_t no_handle = 0;
};

/// Accepts connections on its own thread and hands CAF one end of a socket
/// pair per connection (through `adopt`, which takes ownership of the
/// descriptor and returns false when it could not).
class connection_guard {
public:
  using adopt_fn = std::function<bool(int fd)>;

  /// Binds and starts the guard; on failure returns null and sets `err`.
  static std::unique_ptr<connection_guard>
  start(const connection_guard_options& opts, adopt_fn adopt, std::string& err);

  ~connection_guard();

  connection_guard(const connection_guard&) = delete;
  connection_guard& operator=(const connection_guard&) = delete;

  /// The port it listens on.
  std::uint16_t port() const noexcept { return port_; }

  /// Stops accepting new connections; open ones carry on.
  void close_listener();

  /// A snapshot of the counters.
  connection_guard_stats stats() const;

  struct impl;

private:
  connection_guard() = default;

  std::unique_ptr<impl> impl_;
  std::thread thread_;
  std::uint16_t port_ = 0;
};

} // namespace tasksup::app

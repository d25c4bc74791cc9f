#pragma once

#include "tasksup/supervisor/expected.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tasksup::app {

/// The port `serve` listens on and the control commands connect to when
/// neither `--listen`/`--node` nor $TASKSUP_NODE says otherwise.
inline constexpr std::uint16_t default_node_port = 7420;

/// A node's network address, `HOST:PORT` (`[v6]:PORT` for IPv6 literals).
struct node_address {
  std::string host;
  std::uint16_t port = 0;

  /// `host:port`, bracketing an IPv6 literal.
  std::string to_string() const;
};

/// Parses `HOST:PORT` / `[V6]:PORT`; the port must be 0..65535 (0 only when
/// `allow_port_zero`, for "pick a free port"). Errors say what was expected.
expected<node_address> parse_node_address(std::string_view text,
                                          bool allow_port_zero = false);

/// The node the control commands talk to without `--node`: $TASKSUP_NODE,
/// else 127.0.0.1:7420.
std::string default_node_text();

/// Whether `host` names only this machine: `localhost`, 127.0.0.0/8, ::1.
/// Names are not resolved: anything else counts as remote.
bool is_loopback_host(std::string_view host);

/// Whether anything accepts TCP connections at an address.
enum class listen_probe {
  /// A connection was accepted (and closed at once).
  listening,
  /// Nothing listens there: the connection was refused, or the host has
  /// no address.
  nothing,
  /// Unknown: no answer in time, or the network failed otherwise.
  unknown,
};

/// Connects to `addr` and closes at once, waiting at most `timeout`: tells
/// "no node there" apart from a node that refused us, so that a command
/// says the one that is true.
listen_probe probe_listening(const node_address& addr,
                             std::chrono::milliseconds timeout);

/// What a command says when nothing listens at `addr` ("cannot reach the
/// node at ADDR: no tasksup node is listening there"), and how to start or
/// name one. `source` says where the
/// address came from (resolve_node_target's node_source).
std::string nothing_listening_text(const node_address& addr,
                                   const std::string& source);

} // namespace tasksup::app

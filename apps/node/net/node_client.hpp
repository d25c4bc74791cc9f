#pragma once

#include "local_control.hpp"
#include "node_address.hpp"
#include "tls_credentials.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/remote_connect.hpp"

#include <CLI/CLI.hpp>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

namespace tasksup::app {

/// How long connecting (TCP, TLS and CAF's handshake) may take.
inline constexpr std::chrono::seconds node_connect_timeout{10};

/// What a control command is given once it is connected.
struct node_session {
  /// The command's own actor (requests, subscriptions).
  caf::scoped_actor& self;
  /// The node's door.
  node_door_actor node;
  /// The address as the user wrote it, for messages.
  std::string address;
  /// The command name, for messages (`tasksup status`).
  std::string command;
};

/// Prepares `cfg` (already set up by `configure_actor_system(cfg, true)`)
/// to connect to nodes with `creds`: unless they are insecure, checks that
/// every file can be read and loads CAF's OpenSSL module with them (CAF
/// aborts the program on a file it cannot load, so a bad file must be
/// caught here). The error names the file. A worker node joining a
/// coordinator uses this with its node credentials, a command with its
/// client credentials.
std::optional<error> configure_node_client(caf::actor_system_config& cfg,
                                           const node_credentials& creds);

/// Connects to the node at `addr` with `creds` (mutual TLS through CAF's
/// OpenSSL module; plain TCP when insecure) and returns the door it serves
/// (a node whose door has another interface, another version, is an
/// error).
/// `sys` must have been configured by `configure_node_client` with the same
/// credentials. A node that refuses the certificate, or whose certificate
/// is not signed by our CA, ends the connection: that is an error here.
/// Connecting takes at most `node_connect_timeout` (`connect_within`);
/// `sys` should not use CAF's connection timeout (see
/// `disable_connection_timeout`).
caf::expected<node_door_actor> connect_to_node(caf::actor_system& sys,
                                               const node_address& addr,
                                               const node_credentials& creds);

/// Adds `--node HOST:PORT` (default $TASKSUP_NODE, else 127.0.0.1:7420),
/// `--certs DIR` and `--insecure` (how the command proves who it is; see
/// `client_certs_help`). A program runs one command, so the last two are
/// kept for `with_node` rather than passed around.
void add_node_option(CLI::App* cmd, std::string& node);

/// The `--help` text on how the node is chosen, for command footers.
std::string node_help();

/// Connects to the node at `node` and runs `body` with the session; returns
/// its exit status. An unparsable address is bad input (2); an unreachable
/// node, one that refuses our certificate, or credentials that cannot be
/// read are reported on stderr and give `exit_status::unavailable` (3).
/// With `watch_signals`, SIGINT/SIGTERM arrive at `self` as
/// `(signal_atom, count)` instead of ending the program.
int with_node(const std::string& command, const std::string& node,
              bool watch_signals,
              const std::function<int(node_session&)>& body);

/// Reports a failed request on stderr and returns the exit status for it:
/// a timeout or a lost connection is `unavailable` (3), a refusal by the
/// node (`unknown_task`, `invalid_task`, ...) is as `refusal_status` says.
int report_request_error(const node_session& s, const caf::error& err,
                         int refusal_status);

/// Subscribes the session to every event of the node (`(event, event)`
/// messages arrive at `s.self`) and monitors the node, so that its loss
/// arrives as a down message. False, with `rc` set and the failure
/// reported, when the node did not accept.
bool subscribe_to_node(node_session& s, int& rc);

/// Sends a control request `xs...` answered with a bool and prints
/// `done_text` or `noop_text`: shared by stop, kill, retry-now and
/// fallback-now. Returns 0 when it took effect, 1 when it did not, 3 when
/// the node refused (unknown task) or did not answer.
template<class... Ts>
int control_request(node_session& s, const std::string& done_text,
                    const std::string& noop_text, Ts&&... xs) {
  int rc = 0;
  s.self->request(s.node, node_request_timeout, std::forward<Ts>(xs)...)
    .receive(
      [&](bool took_effect) {
        std::cout << (took_effect ? done_text : noop_text) << '\n';
        rc = took_effect ? 0 : 1;
      },
      [&](caf::error& err) { rc = report_request_error(s, err, 3); });
  return rc;
}

} // namespace tasksup::app

#pragma once

// Which node a client command talks to, and where it finds that node's
// certificates and control socket, as kubectl's current context does it:
// `tasksup serve` records the node it runs as its user's current node (a
// small file, mode 0600), and commands given no --node, --state-dir or
// environment use it. `tasksup context` shows, sets and clears it. No actor
// system needed: the thin front program resolves the node the same way.
//
// Precedence, for each of the two things a command needs:
//   node address: --node, else $TASKSUP_NODE, else the current node, else
//                 127.0.0.1:7420;
//   state dir:    --state-dir, else $TASKSUP_STATE_DIR, else the current
//                 node's (when the command talks to that node), else the
//                 default ($XDG_STATE_HOME/tasksup, /var/lib/tasksup for
//                 root, ~/.local/state/tasksup).
// Certificates are then --certs, else $TASKSUP_CERTS, else <state dir>/certs.

#include "tasksup/supervisor/expected.hpp"

#include <optional>
#include <string>

namespace tasksup::app {

/// The node recorded as current: its address (HOST:PORT, as a client
/// connects to it), its state directory (absolute) and, when the node was
/// given `--certs DIR`, that directory (else empty: <state dir>/certs).
struct current_node {
  std::string node;
  std::string state_dir;
  std::string certs_dir;
};

/// Where the current node is recorded: $XDG_CONFIG_HOME/tasksup/current-node,
/// else ~/.config/tasksup/current-node (the home from $HOME, else the
/// password database). Empty when there is no home to keep it in.
std::string current_node_path();

/// The recorded current node; nullopt when none is recorded (or the file
/// cannot be read or is not one tasksup wrote).
std::optional<current_node> read_current_node();

/// Records `x` as the current node (written whole and renamed into place,
/// mode 0600; its directory is made 0700 when created).
expected<bool> write_current_node(const current_node& x);

/// Removes the record; with `only_if`, only when it still names that node
/// (a node that stops leaves another node's record alone). Returns whether
/// a record was removed.
bool clear_current_node(const std::optional<current_node>& only_if = {});

/// The address a client connects to for a node listening on `host:port`:
/// a wildcard host (0.0.0.0, ::) becomes the loopback address.
std::string client_address_for(const std::string& host, unsigned port);

/// The node a client command talks to, and where each part came from (for
/// messages that say what to pass instead).
struct node_target {
  /// HOST:PORT, not yet parsed.
  std::string node;
  /// "--node", "$TASKSUP_NODE", "the current node" or "the default".
  std::string node_source;
  /// Absolute.
  std::string state_dir;
  /// "--state-dir", "$TASKSUP_STATE_DIR", "the current node" or
  /// "the default".
  std::string state_dir_source;
  /// Where the client certificates are unless --certs or $TASKSUP_CERTS
  /// say otherwise: the current node's certificate directory when it was
  /// recorded and the state directory is the current node's, else
  /// <state_dir>/certs.
  std::string certs_dir;
};

/// Resolves a command's node and state directory from its flags
/// (`node_flag`, `state_dir_flag`; empty when not given), the environment
/// and the current node, by the precedence above.
node_target resolve_node_target(const std::string& node_flag,
                                const std::string& state_dir_flag);

/// The `--help` text on how a client command chooses its node and state
/// directory.
std::string node_target_help();

} // namespace tasksup::app

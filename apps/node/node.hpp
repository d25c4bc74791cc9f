#pragma once

// A coordinator node: what `tasksup serve` runs. node.cpp is the node's
// composition root: it checks the options, opens the state the node keeps
// (journal, certificates, runtimes), and starts the node's parts as an
// ordered list of children, as OTP's child specs: each starts after the ones
// before it, and they stop in reverse order (at shutdown, or when one fails
// to start).

#include "connection_guard.hpp"
#include "leadership.hpp"
#include "nats_bridge.hpp"
#include "worker_node.hpp"

#include "tasksup/actors/node_door_actor.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tasksup::app {

/// What a node is started with (the flags of `tasksup serve`).
struct node_options {
  /// HOST:PORT of the front door (port 0 picks a free one).
  std::string listen;
  std::string config_dir;
  /// The runtime for tasks that name none; empty: node.json's default.
  std::string runtime;
  std::string work_dir;
  /// Listen (and serve HTTP) on an address that is not loopback.
  bool allow_remote = false;
  std::string state_dir;
  bool no_journal = false;
  /// Empty: the SQLite journal in the state directory. A postgresql:// URL:
  /// the journal in that database, shared with standby coordinators (see
  /// leadership.hpp); attempts then run on worker nodes only.
  std::string journal_url;
  /// With a shared journal: how long a take or renewal of the leader lease
  /// holds (a standby takes over within about this long of a crash).
  double lease_s = default_lease_s;
  std::string journal_sync = "full";
  double retain_days = 7;
  std::int64_t retain_tasks = 10000;
  /// HOST:PORT for /metrics and the dashboard; empty: off.
  std::string http;
  /// The HTTP server's token file; empty: <state dir>/http-token.
  std::string http_token_file;
  /// Task-end hooks (see notifier.hpp).
  std::string notify_command;
  std::string notify_url;
  std::vector<std::string> notify_on;
  /// A worker node: the coordinator to join (see worker_node.hpp).
  worker_node_options worker;
  /// A coordinator drops a worker node (and retries its attempts
  /// elsewhere) after this long without a heartbeat from it.
  double peer_timeout_s = 10;
  /// Connections the front door keeps open at most (see
  /// connection_guard_options::max_connections).
  std::size_t max_connections = default_max_connections;
  /// After a restart of a coordinator whose journal names worker nodes, how
  /// long attempts wait for a worker to join before running here.
  double worker_wait_s = default_worker_wait_s;
  /// Bounds on the awaits and event subscriptions clients leave pending
  /// (see door_options); defaults there.
  std::size_t max_pending_per_client = door_options{}.max_pending_per_client;
  std::size_t max_pending = door_options{}.max_pending;
  double await_timeout_s =
    std::chrono::duration<double>(door_options{}.await_timeout).count();
  /// NATS JetStream (nats_bridge.hpp): task submissions from a stream and
  /// events published; an empty `nats.url`: off.
  nats_options nats;
  /// Certificate directory (see tls_server_context.hpp); --insecure: none.
  std::string certs;
  bool insecure = false;
};

/// Runs a coordinator node until SIGINT/SIGTERM, then stops its tasks
/// (gracefully, then killed after a grace period or a second signal) and
/// its parts. Returns the program's exit status: bad_input for options that
/// do not make sense (said on stderr), unavailable when the node's state or
/// a listening socket cannot be had, deposed when another coordinator took
/// the shared journal over, else ok.
int run_node(const node_options& opts);

} // namespace tasksup::app

#pragma once

// `tasksup serve --join HOST:PORT`: a worker node. It offers its capacity
// (attempts at once, runtimes, labels) to a coordinator and runs the
// attempts the coordinator places on it; the tasks, their journal and their
// supervisors stay on the coordinator. See README "Design: the cluster".

#include <chrono>
#include <string>
#include <vector>

namespace tasksup::app {

/// Everything a worker node is started with.
struct worker_node_options {
  /// The coordinator, HOST:PORT; or coordinators sharing a journal,
  /// HOST:PORT,HOST:PORT,...: the worker joins the one that leads, and
  /// follows the leadership when it moves.
  std::string join;
  /// The node's name in the cluster; empty: the host name.
  std::string name;
  /// `KEY=VALUE` labels tasks can ask for (`placement.labels`).
  std::vector<std::string> labels;
  std::string config_dir;
  /// Where attempt directories go; empty: `<state dir>/attempts`.
  std::string work_dir;
  std::string state_dir;
  /// Credentials to join with (`--certs`, see tls_credentials.hpp), or
  /// plain TCP with `insecure`.
  std::string certs;
  bool insecure = false;
  /// How often CAF heartbeats flow both ways.
  std::chrono::milliseconds heartbeat{1000};
  /// Without a word from the coordinator for this long, the connection is
  /// dropped: keep it below the coordinator's --peer-timeout. The attempts
  /// here then wait `failover_grace` for a coordinator to adopt them; a
  /// coordinator that does not (it moved them elsewhere: a partition) has
  /// them killed as soon as the node joins it again.
  std::chrono::milliseconds lease{5000};
  /// How long the attempts running here outlive the connection to their
  /// coordinator, for the coordinator that takes over (or the same one,
  /// restarted) to adopt them; zero: they are killed with the connection.
  std::chrono::milliseconds failover_grace{60000};
};

/// Runs a worker node until SIGINT/SIGTERM; returns the exit status.
int run_worker_node(const worker_node_options& opts);

} // namespace tasksup::app

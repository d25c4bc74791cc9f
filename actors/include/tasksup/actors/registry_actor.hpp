#pragma once

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/group_supervisor_actor.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/config.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tasksup {

/// How long a restarted coordinator waits for its worker nodes by default
/// (registry_options::worker_wait_s).
inline constexpr double default_worker_wait_s = 60;

/// What a node's registry is built from.
struct registry_options {
  /// The node's validated configuration: node limits, environments,
  /// classifier rules and supervisor defaults (for `submit_json`).
  config_set config;
  /// Runtimes by name ("process", "docker", ...). A runtime under "*"
  /// serves every task whose runtime has no entry of its own.
  std::map<std::string, std::shared_ptr<runtime::container_runtime>> runtimes;
  /// Seeds trace ids, span ids and backoff jitter.
  std::uint64_t seed = 0;
  /// Root of the attempt directories (see supervisor_options).
  std::string attempt_root;
  /// Finished tasks kept for `status` and `await` (the node's retention,
  /// `--retain-tasks`); the oldest go first, each told to the journal to
  /// drop, and `status` of one says when and why it went.
  std::size_t history_limit = 10000;
  /// Finished tasks older than this (seconds since they finished) go too
  /// (`--retain-days`); 0: kept regardless of age. Checked when a task
  /// finishes, at a restore and when `status` is asked.
  double history_max_age_s = 0;
  /// This node's name, answered to worker nodes that join.
  std::string node_name = "coordinator";
  /// Seconds without a heartbeat after which a worker node's connection is
  /// dropped (`--peer-timeout`); a worker whose lease is not below it is
  /// refused. 0: not checked.
  double peer_timeout_s = 0;
  /// After a restart of a coordinator that had worker nodes (the journal
  /// names them), how long attempts wait for a worker to join before the
  /// coordinator runs them itself.
  double worker_wait_s = default_worker_wait_s;
  /// Attempts run on worker nodes only, never on the coordinator itself
  /// (they wait until a worker joins): a coordinator whose journal is shared
  /// with standbys, as an attempt here would not outlive a failover.
  bool workers_only = false;
  /// The leadership's epoch (a coordinator on a shared journal; 0
  /// otherwise): every placement on a worker node carries it.
  std::int64_t leader_epoch = 0;
  /// The node's journal (null: tasks live in memory only). With one, a task
  /// is recorded before `submit` answers, and its events and end follow.
  journal_actor journal;
  /// What the journal held when the node started: finished tasks come back
  /// as they ended, unfinished ones are rebuilt and resume.
  journal_snapshot restored;
  /// Runs the schedules (`config.schedules`, and those `schedule add`
  /// adds): a node's, not `tasksup run`'s.
  bool schedules = false;
};

/// A node's registry: the node services its task supervisors ask for
/// (node_services_actor), the client protocol (node_client_actor), the
/// node's health, the events and results of the task supervisors an
/// embedding application spawns with it as their parent, and the host of
/// groups' task members (group_host_actor: the groups of group documents
/// it was given, and groups an embedding application spawns with it as
/// their host).
using registry_actor = node_services_actor::extend_with<node_client_actor>::
  extend_with<group_host_actor>::extend<
    caf::replies_to<health_atom>::with<node_health>,
    caf::reacts_to<event_atom, event>,
    caf::reacts_to<event_atom, std::vector<event>>,
    caf::reacts_to<escalate_atom, task_result>,
    caf::reacts_to<escalate_atom, task_result, caf::actor_addr>>;

/// Spawns the registry of one node. It spawns and monitors one task
/// supervisor per task and serves them attempt slots (max_concurrent, FIFO:
/// `slot_scheduler`), per-agent circuit breakers and the retry budget. Its
/// child, the event hub, keeps every task's events and sends them to the
/// subscribers; the task supervisors send their events and results there.
/// Time comes from the actor clock.
registry_actor spawn_registry(caf::actor_system& sys, registry_options opts);

} // namespace tasksup

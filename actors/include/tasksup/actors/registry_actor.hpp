#pragma once

#include "tasksup/actors/cluster.hpp"
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
  /// Finished tasks kept for `status` and `await`; the oldest go first.
  std::size_t history_limit = 10000;
  /// This node's name, answered to worker nodes that join.
  std::string node_name = "coordinator";
  /// The node's journal (null: tasks live in memory only). With one, a task
  /// is recorded before `submit` answers, and its events and end follow.
  journal_actor journal;
  /// What the journal held when the node started: finished tasks come back
  /// as they ended, unfinished ones are rebuilt and resume.
  journal_snapshot restored;
};

/// A node's registry: the node services its task supervisors ask for
/// (node_services_actor), and for clients: submit (-> the task id),
/// control requests on a task (-> whether they took effect), `forget` a
/// finished task, status (all, or one), health, an attempt's log, `await` a
/// task's result, and subscriptions to the node's events (all, or one
/// task's, answered with its history so far). It takes the events and
/// results of the task supervisors an embedding application spawns with it
/// as their parent, and worker nodes that join (-> the node's name).
using registry_actor = node_services_actor::extend<
  caf::replies_to<submit_atom, task_spec>::with<std::string>,
  caf::replies_to<submit_json_atom, std::string>::with<std::string>,
  caf::replies_to<submit_json_atom, std::string, bool>::with<std::string>,
  caf::replies_to<stop_atom, std::string, stop_mode>::with<bool>,
  caf::replies_to<retry_now_atom, std::string>::with<bool>,
  caf::replies_to<pause_atom, std::string>::with<bool>,
  caf::replies_to<resume_atom, std::string>::with<bool>,
  caf::replies_to<force_fallback_atom, std::string>::with<bool>,
  caf::replies_to<forget_atom, std::string>::with<bool>,
  caf::replies_to<status_atom>::with<std::vector<task_status>>,
  caf::replies_to<health_atom>::with<node_health>,
  caf::replies_to<status_atom, std::string>::with<task_status>,
  caf::replies_to<logs_atom, std::string, int,
                  std::uint64_t>::with<int, std::uint64_t, std::string, bool>,
  caf::replies_to<await_atom, std::string>::with<task_result>,
  caf::replies_to<subscribe_atom, subscriber_actor>::with<bool>,
  caf::replies_to<subscribe_atom, subscriber_actor,
                  std::string>::with<std::vector<event>>,
  caf::replies_to<unsubscribe_atom, subscriber_actor>::with<bool>,
  caf::reacts_to<event_atom, event>,
  caf::reacts_to<event_atom, std::vector<event>>,
  caf::reacts_to<escalate_atom, task_result>,
  caf::reacts_to<escalate_atom, task_result, caf::actor_addr>,
  caf::replies_to<join_atom, node_offer, node_agent_actor>::with<std::string>,
  caf::replies_to<nodes_atom>::with<std::vector<node_info>>>;

/// Spawns the registry of one node. It spawns and monitors one task
/// supervisor per task and serves them attempt slots (max_concurrent, FIFO:
/// `slot_scheduler`), per-agent circuit breakers and the retry budget. Its
/// child, the event hub, keeps every task's events and sends them to the
/// subscribers; the task supervisors send their events and results there.
/// Time comes from the actor clock.
registry_actor spawn_registry(caf::actor_system& sys, registry_options opts);

} // namespace tasksup

#pragma once

#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/config.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

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

/// Spawns the registry of one node. It accepts
/// `(submit, task_spec)`, `(submit_json, text)` and
/// `(submit_json, text, replace)` (-> task id or error),
/// `(stop, task_id, stop_mode)`, `(retry_now, task_id)`,
/// `(force_fb, task_id)` (-> bool), `(status)` (-> vector<task_status>),
/// `(status, task_id)` (-> task_status), `(await, task_id)` (-> task_result
/// when done), `(subscribe, actor)` / `(unsubscribe, actor)`. It spawns and
/// monitors one task supervisor per task and serves them attempt slots
/// (max_concurrent, FIFO: `slot_scheduler`), per-agent circuit breakers and
/// the retry budget. Its child, the event hub, keeps every task's events and
/// sends them to the subscribers; the task supervisors send their events and
/// results there. Time comes from the actor clock.
caf::actor spawn_registry(caf::actor_system& sys, registry_options opts);

} // namespace tasksup

#pragma once

// What a task supervisor keeps for its whole life, built once when it is
// spawned: the task's own fields, and what it shares with other tasks of
// the node (the task machine of its settings and chain, the runtime, the
// actors it asks). Internal to the actors library.

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_machine.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/actor.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::detail {

/// A task's own settings that never change once its supervisor runs: the
/// parts of its task_spec every attempt is built from, and its trace.
/// Memory per parked task (BENCHMARKS.md §2): the task's start-only inputs
/// (selection, default agent, classifier rules) are not kept.
struct task_settings {
  /// The task's id, prompt, container and limits.
  task_attempt_fields task;
  std::string trace_id;
  /// Null when the task has no repository, gates, preflight, feedback or
  /// answer schema (most tasks have none).
  std::unique_ptr<const task_hook_fields> hooks;
  /// The answer schema of `hooks`, compiled; null for none.
  std::shared_ptr<const answer_schema> answer;
  /// Why the task's answer schema did not compile (then every answer
  /// fails with it); empty otherwise.
  std::string answer_error;
};

/// The file an agent creates to say "done, do not restart me", as the host
/// sees it, for attempt directory `attempt_dir`.
std::string done_file(const std::string& attempt_dir);

/// What the tasks of a node usually have in common. One block per distinct
/// combination, shared between the tasks that have it.
struct shared_settings {
  /// A machine for `cfg` and a chain whose agents have `providers`.
  shared_settings(std::shared_ptr<const supervisor_config> cfg,
                  std::vector<std::string> providers)
    : machine(std::move(cfg), std::move(providers)) {}

  task_machine machine;
  std::shared_ptr<const std::vector<agent_spec>> agents;
  std::shared_ptr<runtime::container_runtime> runtime;
  classifier_actor classifier;
  backoff_actor backoff;
  node_services_actor services;
  std::string attempt_root;
  std::int64_t leader_epoch = 0;
  /// The container workers' timer (supervisor_options::worker_timer). Not
  /// compared: it is the registry's, as `services` is.
  std::function<void(double, std::function<void()>)> worker_timer;
};

/// `cfg`, shared with every live task that has exactly the same settings.
std::shared_ptr<const supervisor_config> shared_config(supervisor_config cfg);

/// The agent chain, shared with every live task that has the same one.
std::shared_ptr<const std::vector<agent_spec>>
shared_agents(std::vector<agent_spec> agents);

/// `x`, shared with every live task that has the same (settings, chain,
/// runtime and actors by identity, attempt root).
std::shared_ptr<const shared_settings> shared_node(shared_settings x);

/// The spec of attempt `attempt` of `agent`: argv with the prompt (or
/// TASKSUP_PROMPT), the directory `<attempt_root>/<task id>/attempt-<n>`,
/// mounts and limits; the trace context of the attempt's span `span_id`
/// (the runtime gives it to the agent: `runtime::add_trace_env`).
runtime::attempt_spec make_attempt_spec(const task_settings& task,
                                        const shared_settings& node,
                                        const agent_spec& agent, int attempt,
                                        std::string_view span_id = {});

} // namespace tasksup::detail

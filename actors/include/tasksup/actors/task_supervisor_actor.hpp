#pragma once

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup {

/// Everything one task supervisor needs. Only `task`, `runtime` and a parent
/// are required; the rest has working defaults for an embedding application.
struct supervisor_options {
  /// The task, resolved by `resolve_task` (it runs under
  /// `effective_settings(task)`).
  task_spec task;
  /// The agent used when the task names none.
  agent_spec default_agent;
  /// The round-robin pick of the first agent; nullopt starts at agents[0].
  std::optional<std::string> start_agent_id;
  std::shared_ptr<runtime::container_runtime> runtime;
  /// The classifier to ask; when null the supervisor spawns its own with the
  /// task's rules (or the defaults) and stops it when it ends.
  classifier_actor classifier;
  /// The backoff actor to ask; when null the supervisor spawns its own.
  backoff_actor backoff;
  /// The node services (a registry): attempt slots, circuit breakers and the
  /// retry budget. When null none of them applies (standalone supervisor).
  node_services_actor services;
  /// The task's trace id (32 hex); generated from `seed` when empty.
  std::string trace_id;
  /// Seeds the span ids (and the trace id when generated).
  std::uint64_t seed = 0;
  /// Each attempt gets `<attempt_root>/<task id>/attempt-<n>` as its
  /// directory; empty means the system's temporary directory + "/tasksup".
  std::string attempt_root;
  /// The leadership's epoch of a coordinator on a shared journal (0
  /// otherwise): every attempt placed on a worker node carries it.
  std::int64_t leader_epoch = 0;
  /// The timer the attempts' container workers share (`make_actor_timer`;
  /// empty: each makes its own). A registry gives its tasks one.
  std::function<void(double, std::function<void()>)> worker_timer;
  /// Whether the supervisor emits `task_submitted` when it starts.
  bool emit_submitted = true;
  /// Whether `parent` also takes events as `(event, std::vector<event>)`, in
  /// order. The supervisor then holds the events of one failed attempt
  /// while it asks the classifier and the backoff actor, and sends them in
  /// one message when it waits for nothing more of them (a registry does:
  /// one turn of its instead of one per event).
  bool event_batches = false;
  /// The node's journal (null: nothing is journaled). Every input that
  /// changes the task is recorded there before its effects are carried out
  /// (and before a control request is answered).
  journal_actor journal;
  /// The task's number in the journal.
  std::int64_t journal_seq = 0;
  /// Set for a task rebuilt after a node restart: its journaled inputs are
  /// replayed (nothing is carried out again), then the task resumes.
  bool resume = false;
  std::vector<journaled_input> replay;
  /// Attempts of the task's earlier runs: a group member's rerun numbers
  /// its attempts from this plus 1 (`<attempt_root>/<id>/attempt-<n>` of
  /// the earlier runs stay, and so does its state directory).
  int attempts_before = 0;
};

/// Spawns the supervisor of one task: it runs attempts through
/// container workers, classifies failures, retries after backoff, falls back
/// along the agent chain and honours `(stop, stop_mode)`, `(retry_now)` and
/// `(force_fb)` (each answered with a bool: whether it took effect) and
/// `(status)` (answered with a `task_status`). Every event goes to `parent`
/// as `(event, event)` (or, with `event_batches`, several in order as
/// `(event, std::vector<event>)`); at the end the full result goes to `parent`
/// as
/// `(escalate, task_result)` and the supervisor quits. `parent` may be any
/// actor: a registry, or an embedding application's own actor.
task_supervisor_actor spawn_task_supervisor(caf::actor_system& sys,
                                            task_parent_actor parent,
                                            supervisor_options opts);

} // namespace tasksup

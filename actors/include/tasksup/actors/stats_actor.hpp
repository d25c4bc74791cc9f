#pragma once

#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/node_stats.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>

namespace tasksup {

/// The statistics actor's interface: the registry's event stream in, the
/// node's figures out (see `spawn_stats`).
using stats_actor = caf::typed_actor<
  caf::reacts_to<event_atom, event>,
  caf::replies_to<metrics_atom>::with<std::string>,
  caf::replies_to<agents_atom, double>::with<std::string>,
  caf::replies_to<view_atom>::with<std::string>,
  caf::replies_to<view_atom, std::uint64_t, std::string>::with<std::string>,
  caf::replies_to<view_atom, std::string>::with<std::string>,
  caf::replies_to<clock_atom>::with<task_clocks>,
  caf::replies_to<clock_atom, std::string>::with<task_clocks>,
  caf::replies_to<clock_atom, std::vector<std::string>>::with<task_clocks>>;

/// Spawns the node's statistics actor: it subscribes to `registry`'s event
/// stream, folds every event into a `node_stats`, and on start replays the
/// history of every task the registry has (after a restart these come from
/// the journal through the same registry API: finished tasks, and the
/// earlier attempts of tasks it resumed), each event once. It answers
/// `(metrics)` -> Prometheus text, `(agents, window_s)` -> JSON,
/// `(view)` -> JSON of every task, `(view, limit, after)` -> one page of
/// them, newest first (`node_stats::tasks_page_json`), `(view, task_id)` ->
/// JSON of one task with its events, `(clock)` -> every task's times as
/// `task_clocks` (local to the node), `(clock, task_id)` -> one task's. Figures
/// that live in the registry (task states, breakers, budget, slots) are asked
/// for at the moment of the query, and so are the figures of `journal` (the
/// node's journal actor, if any).
stats_actor spawn_stats(caf::actor_system& sys, registry_actor registry,
                        journal_actor journal = {});

} // namespace tasksup

#pragma once

// Internal to tasksup::actors: the registry's event hub, the child that
// owns the node's events (docs/ARCHITECTURE.md, "The registry").

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/atom.hpp>
#include <caf/local_actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tasksup::detail {

/// `(track, task id, journal number, last event number, restored)`, sent
/// before the task's supervisor is spawned: its events are kept from now on
/// (a new run of the id starts an empty history) and journaled under that
/// number; `restored` marks a task rebuilt after a restart, whose history
/// before is only in the journal.
using track_atom = caf::atom_constant<caf::atom("track")>;

/// `(untrack, task id)`: the task's history goes (evicted or forgotten).
using untrack_atom = caf::atom_constant<caf::atom("untrack")>;

/// The events of every task: kept per task for clients that subscribe late,
/// journaled, and sent to every subscriber. Task supervisors send their
/// events and then their result here, so a result never overtakes its
/// events: the hub publishes the events and passes the result on to the
/// registry as `(escalate, task_result, supervisor address)`. The registry
/// sends a supervisor's death the same way round, so it, too, comes after
/// that supervisor's last events and result.
using event_hub_actor = caf::typed_actor<
  caf::reacts_to<event_atom, event>,
  caf::reacts_to<event_atom, std::vector<event>>,
  caf::reacts_to<escalate_atom, task_result>,
  caf::reacts_to<escalate_atom, task_result, caf::actor_addr>,
  caf::replies_to<subscribe_atom, subscriber_actor>::with<bool>,
  caf::replies_to<subscribe_atom, subscriber_actor,
                  std::string>::with<std::vector<event>>,
  caf::replies_to<unsubscribe_atom, subscriber_actor>::with<bool>,
  caf::reacts_to<track_atom, std::string, std::int64_t, std::int64_t, bool>,
  caf::reacts_to<untrack_atom, std::string>>;

/// Spawns the hub of `registry`, linked to it; events go to `journal` when
/// it is set.
event_hub_actor spawn_event_hub(caf::local_actor* registry,
                                journal_actor journal);

} // namespace tasksup::detail

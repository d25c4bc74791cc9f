#pragma once

// A node's schedules (docs/BEHAVIOUR.md, "Schedules"): the scheduler fires
// each schedule on time and submits its task to its host (the registry),
// following the schedule's overlap policy while an earlier run is still
// going, and after a restart catches up on the runs it missed (at most the
// schedule's `catchup`). Schedules come from the config directory
// (`schedules/<name>.json`) or are added by `tasksup schedule add`; what
// must survive a restart (the added schedules, which are paused, the last
// fire, the run still going) is one record of the journal's node state.

#include "tasksup/actors/atoms.hpp"
#include "tasksup/actors/inspect.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/schedule.hpp"
#include "tasksup/supervisor/task_model.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/actor_system.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tasksup {

/// The scheduler's own timer.
using schedule_tick_atom = caf::atom_constant<caf::atom("schedtick")>;

/// What the scheduler needs of its host: it submits runs, awaits their
/// ends, and stops one (`cancel_other`).
using schedule_host_actor = caf::typed_actor<
  caf::replies_to<submit_atom, task_spec>::with<std::string>,
  caf::replies_to<await_atom, std::string>::with<task_result>,
  caf::replies_to<stop_atom, std::string, stop_mode>::with<bool>>;

/// The scheduler: `(schedule, request)` -> the schedules it concerns (all
/// of them for `list`, the one changed otherwise).
using scheduler_actor = caf::typed_actor<
  caf::replies_to<schedule_atom,
                  schedule_request>::with<std::vector<schedule_info>>,
  caf::reacts_to<schedule_tick_atom, std::string, std::uint64_t>>;

/// What the scheduler starts from.
struct scheduler_options {
  schedule_host_actor host;
  /// Where its state goes (node state "schedules"); null: nowhere.
  journal_actor journal;
  /// The node's config: its `schedules` are the files', and their tasks
  /// are parsed against it.
  config_set config;
  /// The state a journal kept ("" for none).
  std::string saved;
};

/// Spawns the scheduler (the registry links itself to it).
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_options opts);

} // namespace tasksup

#pragma once

// Internal to the core: a trigger's task as a delivery would make it, with
// sample values, so the config loader can check it against the rest of the
// config when the trigger loads rather than when the first delivery comes.

#include "tasksup/supervisor/trigger.hpp"

#include <boost/json/object.hpp>

namespace tasksup::detail {

/// `trigger`'s task with every placeholder filled in (`issue.number` by 1,
/// the others by a short word), its id "trigger-check" and, when it has
/// none and the trigger maps a repository, the first mapped one as `repo`.
boost::json::object sample_trigger_task(const trigger_spec& trigger);

} // namespace tasksup::detail

#pragma once

#include "tasksup/supervisor/classifier.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace tasksup {

/// Spawns a classifier actor: answers `(classify, classify_request)` with a
/// `classification`, using the task's own rules when `(set_rules, task_id,
/// rules)` registered some, else its default rules. `(set_rules, rules)`
/// replaces the defaults at run time; a rule set that does not compile is
/// answered with `protocol_error::invalid_rules` and changes nothing.
caf::actor spawn_classifier(caf::actor_system& sys, classifier rules);

} // namespace tasksup

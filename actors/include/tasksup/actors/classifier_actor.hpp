#pragma once

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/classifier.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>
#include <vector>

namespace tasksup {

/// The classifier's interface: a message it does not handle, or a reply of
/// the wrong type, is a compile error at the call site.
///
/// - `(classify, classify_request)` -> `classification`, using the task's
///   own rules when `(set_rules, task_id, rules)` registered some, else the
///   default rules; a successful outcome is answered with an error.
/// - `(set_rules, rules)` -> `true`: replaces the defaults at run time.
/// - `(set_rules, task_id, rules)` -> `true`: one task's own rules.
/// - `(drop_rules, task_id)`: forgets one task's rules (it ended).
///
/// A rule set that does not compile is answered with
/// `protocol_error::invalid_rules` and changes nothing.
using classifier_actor = caf::typed_actor<
  caf::replies_to<classify_atom, classify_request>::with<classification>,
  caf::replies_to<set_rules_atom, std::vector<classifier_rule>>::with<bool>,
  caf::replies_to<set_rules_atom, std::string,
                  std::vector<classifier_rule>>::with<bool>,
  caf::reacts_to<drop_rules_atom, std::string>>;

/// Spawns a classifier actor with `rules` as its defaults.
classifier_actor spawn_classifier(caf::actor_system& sys, classifier rules);

} // namespace tasksup

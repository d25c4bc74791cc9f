#include "tasksup/actors/classifier_actor.hpp"

#include "actor_now.hpp"

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/output_parser.hpp"

#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

struct classifier_state {
  /// The rules used for tasks without their own.
  std::optional<classifier> defaults;
  /// Per-task rule sets, dropped when the task ends.
  std::map<std::string, classifier> per_task;
  static inline const char* name = "tasksup.classifier";
};

caf::result<bool> compile_into(std::vector<classifier_rule> rules,
                               std::optional<classifier>& dst) {
  auto made = classifier::make(std::move(rules));
  if (!made)
    return make_error(protocol_error::invalid_rules, made.error().to_string());
  dst = std::move(*made);
  return true;
}

classifier_actor::behavior_type
classifier_impl(classifier_actor::stateful_pointer<classifier_state> self,
                classifier rules) {
  self->state.defaults = std::move(rules);
  return {
    [=](classify_atom,
        const classify_request& req) -> caf::result<classification> {
      if (req.outcome.succeeded())
        return caf::make_error(caf::sec::invalid_argument,
                               "a successful outcome is never classified");
      auto& st = self->state;
      auto i = st.per_task.find(req.task_id);
      const auto& cls = i != st.per_task.end() ? i->second : *st.defaults;
      // The node's clock on the wall clock's scale reads a quota's reset
      // ("resets 3pm"): the attempt has just ended, so its output is as old
      // as this request; the task machine adds the seconds to the same
      // clock (simulated under the test coordinator).
      using namespace std::chrono;
      auto now = system_clock::time_point{duration_cast<system_clock::duration>(
        duration<double>(detail::now_s(self)))};
      return classify_attempt(cls, req.outcome, req.agent_cli, now);
    },
    [=](set_rules_atom,
        std::vector<classifier_rule> rules) -> caf::result<bool> {
      return compile_into(std::move(rules), self->state.defaults);
    },
    [=](set_rules_atom, const std::string& task_id,
        std::vector<classifier_rule> rules) -> caf::result<bool> {
      std::optional<classifier> compiled;
      auto res = compile_into(std::move(rules), compiled);
      if (compiled)
        self->state.per_task.insert_or_assign(task_id, std::move(*compiled));
      return res;
    },
    [=](drop_rules_atom, const std::string& task_id) {
      self->state.per_task.erase(task_id);
    },
  };
}

} // namespace

classifier_actor spawn_classifier(caf::actor_system& sys, classifier rules) {
  return sys.spawn(classifier_impl, std::move(rules));
}

} // namespace tasksup

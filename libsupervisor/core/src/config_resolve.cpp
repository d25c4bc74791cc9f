#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"

#include <utility>

// The one way in: a task, however it arrived, resolved against the node's
// config and checked by the one validator.

namespace tasksup {

using namespace detail;

namespace {

std::string known_environments(const config_set& cfg) {
  if (cfg.environments.empty())
    return "no environments are configured";
  std::string out = "known: ";
  bool first = true;
  for (const auto& kv : cfg.environments) {
    if (!first)
      out += ", ";
    first = false;
    out += kv.first;
  }
  return out;
}

} // namespace

expected<task_spec> resolve_task(task_spec task, const config_set& cfg,
                                 std::string_view where) {
  bool own_rules = true;
  auto resolved = guarded([&] {
    reader r{where};
    const environment_config* env = nullptr;
    if (!task.environment.empty()) {
      auto it = cfg.environments.find(task.environment);
      if (it == cfg.environments.end())
        r.fail("/environment", "unknown environment " +
                                 quote(task.environment) + " (" +
                                 known_environments(cfg) + ")");
      env = &it->second;
    } else if (auto it = cfg.environments.find("default");
               it != cfg.environments.end()) {
      env = &it->second;
      task.environment = env->name;
    }
    // Supervisor settings: global < environment < task.
    auto settings = cfg.supervisor;
    if (env != nullptr && env->supervisor_overrides) {
      reader env_reader{"environment " + env->name};
      read_supervisor(env_reader, json::value(*env->supervisor_overrides),
                      "/supervisor", settings);
    }
    apply_overrides(settings, task.supervisor);
    task.settings = std::move(settings);
    // The steps come from the task's own keys.
    task.settings.steps.preflight = task.preflight.has_value();
    task.settings.steps.gates = !task.gates.empty();
    task.settings.steps.deliver = task.repo.has_value();
    task.settings.steps.answer = !task.answer_schema.empty();
    // The node's default runtime has no image of its own to offer.
    if (task.runtime.empty() && cfg.node.default_runtime == "docker" &&
        task.image.empty())
      r.fail("/image", "the node's default_runtime is \"docker\": the task "
                       "needs an \"image\" to run its attempts in");
    own_rules = task.classifier_rules.has_value();
    if (env != nullptr) {
      if (!task.selection && !env->selection.agents.empty())
        task.selection = env->selection;
      if (!task.classifier_rules)
        task.classifier_rules = env->classifier_rules;
    }
    return std::move(task);
  });
  if (!resolved)
    return resolved;
  if (auto valid = check_task(*resolved, where, own_rules); !valid)
    return valid.error();
  return resolved;
}

} // namespace tasksup

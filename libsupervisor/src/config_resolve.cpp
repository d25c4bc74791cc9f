#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"

#include <utility>

// The one way in: a task, however it arrived, resolved against the node's
// config and checked by the one validator.

namespace tasksup {

using namespace detail;

namespace {

/// The same schedule, field by field.
bool same_settings_spec(const backoff_spec& a, const backoff_spec& b) {
  return a.kind == b.kind && a.table_s == b.table_s &&
         a.initial_s == b.initial_s && a.multiplier == b.multiplier &&
         a.max_s == b.max_s && a.jit == b.jit;
}

/// Puts the settings of `task` that differ from the built-in defaults over
/// `base`.
void overlay(supervisor_config& base, const supervisor_config& task) {
  const supervisor_config defaults;
  auto take = [](auto& to, const auto& from, const auto& def) {
    if (from != def)
      to = from;
  };
  take(base.max_retries_per_agent, task.max_retries_per_agent,
       defaults.max_retries_per_agent);
  take(base.enable_fallback, task.enable_fallback, defaults.enable_fallback);
  take(base.backoff_base_seconds, task.backoff_base_seconds,
       defaults.backoff_base_seconds);
  take(base.rate_limit_backoff_base, task.rate_limit_backoff_base,
       defaults.rate_limit_backoff_base);
  take(base.max_total_attempts, task.max_total_attempts,
       defaults.max_total_attempts);
  take(base.max_crash_restarts, task.max_crash_restarts,
       defaults.max_crash_restarts);
  for (const auto& [cls, act] : task.actions) {
    auto def = defaults.actions.find(cls);
    if (def == defaults.actions.end() || def->second != act)
      base.actions[cls] = act;
  }
  take(base.restart, task.restart, defaults.restart);
  take(base.intensity.max_restarts, task.intensity.max_restarts,
       defaults.intensity.max_restarts);
  take(base.intensity.period_s, task.intensity.period_s,
       defaults.intensity.period_s);
  take(base.intensity.reset_after_s, task.intensity.reset_after_s,
       defaults.intensity.reset_after_s);
  for (const auto& [cls, spec] : task.backoff)
    base.backoff[cls] = spec;
  if (task.deadline_s)
    base.deadline_s = task.deadline_s;
  take(base.stop_grace_s, task.stop_grace_s, defaults.stop_grace_s);
  take(base.fatal, task.fatal, defaults.fatal);
  if (task.attempt_timeout_s)
    base.attempt_timeout_s = task.attempt_timeout_s;
  if (task.done_exit_code)
    base.done_exit_code = task.done_exit_code;
  if (!same_settings_spec(task.restart_backoff, defaults.restart_backoff))
    base.restart_backoff = task.restart_backoff;
}

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
    overlay(settings, task.supervisor);
    task.supervisor = std::move(settings);
    // The steps come from the task's own keys, whatever `supervisor` said.
    task.supervisor.steps.preflight = task.preflight.has_value();
    task.supervisor.steps.gates = !task.gates.empty();
    task.supervisor.steps.deliver = task.repo.has_value();
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

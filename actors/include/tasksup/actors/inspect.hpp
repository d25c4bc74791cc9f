#pragma once

// `inspect` overloads for the libsupervisor types that travel in messages, so
// CAF can serialize them (network) and render them (deep_to_string). CAF 0.17
// handles enums, maps, vectors and strings itself but not std::optional, for
// which `opt` below writes a presence flag followed by the value.

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/backoff.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <cstdint>
#include <optional>
#include <utility>

namespace tasksup {

namespace detail {

/// Wraps a std::optional member for inspection: a flag, then the value (a
/// default-constructed one when absent, so the wire shape is fixed).
template<class T>
struct opt_ref {
  std::optional<T>& ref;
};

/// Makes an `opt_ref` for use inside an `inspect` argument list.
template<class T>
opt_ref<T> opt(std::optional<T>& x) {
  return opt_ref<T>{x};
}

/// Inspects an optional as (present, value).
template<class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, opt_ref<T>& x) {
  bool present = x.ref.has_value();
  T value = present ? *x.ref : T{};
  return f(caf::meta::type_name("optional"), present, value,
           caf::meta::load_callback([&]() -> caf::error {
             if (present)
               x.ref = std::move(value);
             else
               x.ref.reset();
             return caf::none;
           }));
}

} // namespace detail

/// Serializes an agent.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_spec& x) {
  return f(caf::meta::type_name("agent_spec"), x.agent_id, x.agent_cli,
           x.config_dir, x.cli_flags, x.args, x.prompt_as_argument, x.profile,
           x.env_passthrough, x.output, x.idle_timeout_s, x.provider,
           caf::meta::load_callback([&]() -> caf::error {
             // Untrusted input: an output format this build does not know.
             if (static_cast<uint8_t>(x.output) >
                 static_cast<uint8_t>(output_format::gemini_json))
               return caf::make_error(caf::sec::invalid_argument,
                                      "agent_spec: output_format out of range");
             return caf::none;
           }));
}

/// Serializes token usage.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_usage& x) {
  return f(caf::meta::type_name("token_usage"), x.input_tokens, x.output_tokens,
           x.cached_input_tokens);
}

/// Serializes a structured provider error.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, structured_error& x) {
  return f(caf::meta::type_name("structured_error"), x.http_status, x.type,
           x.message, detail::opt(x.retry_after_s));
}

/// Serializes what an agent's structured output said.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, structured_result& x) {
  return f(caf::meta::type_name("structured_result"), x.final_message,
           detail::opt(x.error), detail::opt(x.usage), detail::opt(x.cost_usd));
}

/// Serializes an agent selection.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_selection& x) {
  return f(caf::meta::type_name("agent_selection"), x.agents, x.agent_fallbacks,
           x.mode);
}

/// Serializes one class's backoff schedule.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, backoff_spec& x) {
  return f(caf::meta::type_name("backoff_spec"), x.kind, x.table_s, x.initial_s,
           x.multiplier, x.max_s, x.jit);
}

/// Serializes restart intensity settings.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, intensity_config& x) {
  return f(caf::meta::type_name("intensity_config"), x.max_restarts, x.period_s,
           x.reset_after_s);
}

/// Serializes a task's supervision policy.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_config& x) {
  return f(caf::meta::type_name("supervisor_config"), x.max_retries_per_agent,
           x.enable_fallback, x.backoff_base_seconds, x.rate_limit_backoff_base,
           x.max_total_attempts, x.max_crash_restarts, x.actions, x.restart,
           x.intensity, x.backoff, detail::opt(x.deadline_s), x.stop_grace_s,
           x.fatal);
}

/// Serializes a classification rule.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classifier_rule& x) {
  return f(caf::meta::type_name("classifier_rule"), x.id, x.cls, x.exit_codes,
           detail::opt(x.oom_killed), x.signals, x.patterns, x.window_lines,
           x.match_all);
}

/// Serializes a classification result.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classification& x) {
  return f(caf::meta::type_name("classification"), x.cls, x.rule, x.line,
           detail::opt(x.retry_after_s));
}

/// Serializes a mount.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, mount_spec& x) {
  return f(caf::meta::type_name("mount_spec"), x.host_path, x.container_path,
           x.read_only);
}

/// Serializes a validated task.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_spec& x) {
  return f(caf::meta::type_name("task_spec"), x.id, x.prompt, x.environment,
           detail::opt(x.selection), x.supervisor,
           detail::opt(x.classifier_rules), x.runtime, x.image, x.env, x.mounts,
           x.workdir, detail::opt(x.memory_limit_mb));
}

/// Serializes an attempt's outcome.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_outcome& x) {
  return f(caf::meta::type_name("attempt_outcome"), x.exit_code, x.signal,
           x.oom_killed, x.tail, x.duration_s, x.artifacts,
           x.infrastructure_error, x.log_path, x.started, x.retry_futile,
           detail::opt(x.structured));
}

} // namespace tasksup

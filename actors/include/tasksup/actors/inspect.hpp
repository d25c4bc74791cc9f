#pragma once

// `inspect` overloads for the libsupervisor types that travel in messages, so
// CAF can serialize them (network) and render them (deep_to_string). CAF 0.17
// handles enums, maps, vectors and strings itself but not std::optional, for
// which `opt` below writes a presence flag followed by the value.
//
// Everything read from the network is untrusted, so loading is checked while
// it happens: every enum against its range (`checked`), every list and map
// against `wire::max_list_entries` before an element is read (`bounded`),
// every string against its limit (`check_sizes` in a load callback), every
// number against `wire::max_number` (`finite`, checked on save as well: CAF
// 0.17's float encoder does not end on an infinity, so one never reaches
// it). A check
// that fails fails the deserialization: CAF drops the message, and the bad
// value never reaches an actor. The wire format is CAF's own (an enum is its
// underlying integer, a list its length then its elements), so the checks
// change nothing for a well-formed peer.

#include "tasksup/supervisor/wire_limits.hpp"

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/backoff.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_spec.hpp"
#include "tasksup/supervisor/text.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tasksup {

namespace detail {

/// The number of enumerators of an enum whose values are 0..n-1; every enum
/// that crosses the network has a specialization.
template<class E>
struct enum_size;

template<>
struct enum_size<error_class>
  : std::integral_constant<std::size_t, all_error_classes.size()> {};

template<>
struct enum_size<action> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<restart_type> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<jitter> : std::integral_constant<std::size_t, 6> {};

template<>
struct enum_size<backoff_spec::kind_t>
  : std::integral_constant<std::size_t, 2> {};

template<>
struct enum_size<selection_mode> : std::integral_constant<std::size_t, 2> {};

template<>
struct enum_size<fatal_scope> : std::integral_constant<std::size_t, 2> {};

template<>
struct enum_size<quota_action> : std::integral_constant<std::size_t, 2> {};

template<>
struct enum_size<delay_source> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<delivery_mode> : std::integral_constant<std::size_t, 3> {};

/// Whether the raw value `x` names an enumerator of `E`.
template<class E>
constexpr bool valid_enum(std::underlying_type_t<E> x) noexcept {
  if constexpr (std::is_signed_v<std::underlying_type_t<E>>)
    if (x < 0)
      return false;
  return static_cast<std::size_t>(x) < enum_size<E>::value;
}

/// Whether `x` is one of the enumerators of `E`.
template<class E>
constexpr bool valid_enum_value(E x) noexcept {
  return valid_enum<E>(static_cast<std::underlying_type_t<E>>(x));
}

/// The error of a value that breaks a wire limit, naming the field.
inline caf::error wire_error(const char* field, std::string what) {
  std::string text = field;
  text += ": ";
  text += what;
  return caf::make_error(caf::sec::invalid_argument, std::move(text));
}

/// An enum member to be range-checked on load.
template<class E>
struct enum_field {
  E& ref;
  const char* name;
};

/// Marks an enum member for a range check on load.
template<class E>
enum_field<E> checked(E& x, const char* name) {
  return enum_field<E>{x, name};
}

/// Inspects an enum as its underlying integer; on load, a value outside the
/// enum's range is an error and `x` keeps its old value.
template<class Inspector, class E>
typename Inspector::result_type inspect(Inspector& f, enum_field<E>& x) {
  if constexpr (Inspector::writes_state) {
    std::underlying_type_t<E> raw = 0;
    return f(raw, caf::meta::load_callback([&]() -> caf::error {
               if (!valid_enum<E>(raw))
                 return wire_error(x.name, "out-of-range value " +
                                             std::to_string(+raw));
               x.ref = static_cast<E>(raw);
               return caf::none;
             }));
  } else {
    return f(x.ref);
  }
}

/// A list or map member whose entry count is checked before its entries are
/// read.
template<class C>
struct list_field {
  C& ref;
  const char* name;
};

/// Marks a list or map member for the `wire::max_list_entries` check.
template<class C>
list_field<C> bounded(C& x, const char* name) {
  return list_field<C>{x, name};
}

template<class T>
struct is_map : std::false_type {};

template<class K, class V, class Cmp, class A>
struct is_map<std::map<K, V, Cmp, A>> : std::true_type {};

/// Loads one element, range-checking it if it is an enum.
template<class Inspector, class T>
caf::error load_element(Inspector& f, T& x, const char* name) {
  if constexpr (std::is_enum_v<T>) {
    auto wrapped = checked(x, name);
    return f(wrapped);
  } else {
    if (auto err = f(x))
      return err;
    if constexpr (std::is_same_v<T, std::string>)
      if (x.size() > wire::max_text_bytes)
        return wire_error(name, "an entry of " + std::to_string(x.size()) +
                                  " bytes (at most " +
                                  std::to_string(wire::max_text_bytes) + ")");
    return caf::none;
  }
}

/// Inspects a list or map in CAF's own format (length, then entries); on
/// load, more than `wire::max_list_entries` entries is an error raised
/// before any entry is read.
template<class Inspector, class C>
typename Inspector::result_type inspect(Inspector& f, list_field<C>& x) {
  if constexpr (Inspector::writes_state) {
    std::size_t n = 0;
    if (auto err = f.begin_sequence(n))
      return err;
    if (n > wire::max_list_entries)
      return wire_error(x.name, std::to_string(n) + " entries (at most " +
                                  std::to_string(wire::max_list_entries) + ")");
    C out;
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (is_map<C>::value) {
        typename C::key_type key{};
        typename C::mapped_type value{};
        if (auto err = load_element(f, key, x.name))
          return err;
        if (auto err = load_element(f, value, x.name))
          return err;
        out.emplace(std::move(key), std::move(value));
      } else {
        typename C::value_type value{};
        if (auto err = load_element(f, value, x.name))
          return err;
        out.push_back(std::move(value));
      }
    }
    if (auto err = f.end_sequence())
      return err;
    x.ref = std::move(out);
    return caf::none;
  } else {
    return f(x.ref);
  }
}

/// One string limit for `check_sizes`.
struct size_limit {
  const std::string& value;
  std::size_t max;
  const char* name;
};

/// The first string longer than its limit as an error, or none.
inline caf::error check_sizes(std::initializer_list<size_limit> limits) {
  for (auto& x : limits)
    if (x.value.size() > x.max)
      return wire_error(x.name, std::to_string(x.value.size()) +
                                  " bytes (at most " + std::to_string(x.max) +
                                  ")");
  return caf::none;
}

/// An id that must be lowercase hex (a W3C trace or span id), for
/// `check_hex`.
struct hex_id {
  const std::string& value;
  const char* name;
};

/// The first id with a character other than 0-9 and a-f as an error, or
/// none. Empty ids pass (no trace).
inline caf::error check_hex(std::initializer_list<hex_id> ids) {
  for (auto& x : ids)
    if (!lower_hex(x.value))
      return wire_error(x.name, "not a lowercase hex id");
  return caf::none;
}

/// Wraps a std::optional member for inspection: a flag, then the value (a
/// default-constructed one when absent, so the wire shape is fixed), seen
/// through `Wrap`: the value itself (`opt`), its entry count checked
/// (`opt_list`) or its range checked (`opt_checked`).
template<class T, class Wrap>
struct opt_ref {
  std::optional<T>& ref;
  Wrap wrap;
};

/// The value itself, for `opt`.
struct as_is {
  template<class T>
  T& operator()(T& x) const {
    return x;
  }
};

/// Makes an `opt_ref` for use inside an `inspect` argument list.
template<class T>
opt_ref<T, as_is> opt(std::optional<T>& x) {
  return {x, as_is{}};
}

/// An optional list, its entry count checked like `bounded`.
template<class C>
auto opt_list(std::optional<C>& x, const char* name) {
  auto wrap = [name](C& value) { return bounded(value, name); };
  return opt_ref<C, decltype(wrap)>{x, wrap};
}

/// An optional enum, range-checked on load like `checked`.
template<class E>
auto opt_checked(std::optional<E>& x, const char* name) {
  auto wrap = [name](E& value) { return checked(value, name); };
  return opt_ref<E, decltype(wrap)>{x, wrap};
}

/// Inspects an optional as (present, value as wrapped).
template<class Inspector, class T, class Wrap>
typename Inspector::result_type inspect(Inspector& f, opt_ref<T, Wrap>& x) {
  bool present = x.ref.has_value();
  T value = present ? *x.ref : T{};
  decltype(auto) field = x.wrap(value);
  return f(caf::meta::type_name("optional"), present, field,
           caf::meta::load_callback([&]() -> caf::error {
             if (present)
               x.ref = std::move(value);
             else
               x.ref.reset();
             return caf::none;
           }));
}

/// Whether `x` is a number a message may carry: finite and within
/// `wire::max_number` of zero.
inline bool sendable(double x) noexcept {
  return std::isfinite(x) && std::fabs(x) <= wire::max_number;
}

inline bool sendable(const std::optional<double>& x) noexcept {
  return !x || sendable(*x);
}

inline bool sendable(const std::optional<std::optional<double>>& x) noexcept {
  return !x || sendable(*x);
}

inline bool sendable(const std::vector<double>& xs) noexcept {
  for (auto x : xs)
    if (!sendable(x))
      return false;
  return true;
}

/// A number member (a double, an optional or clearable one, or a list of
/// them) to be checked by `sendable` on save and on load.
template<class T>
struct number_field {
  T& ref;
  const char* name;
};

/// Marks a number member for the `sendable` check.
template<class T>
number_field<T> finite(T& x, const char* name) {
  return number_field<T>{x, name};
}

/// A setting a task may leave unset, clear, or set (`clearable`).
template<class T>
struct clearable_ref {
  clearable<T>& ref;
  const char* name;
};

/// Makes a `clearable_ref` for use inside an `inspect` argument list.
template<class T>
clearable_ref<T> clear_opt(clearable<T>& x, const char* name) {
  return clearable_ref<T>{x, name};
}

/// Inspects a clearable setting as (state, value): state 0 is unset, 1
/// cleared, 2 set (anything else is refused on load); the value is a
/// default-constructed one unless set, so the wire shape is fixed.
template<class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, clearable_ref<T>& x) {
  std::uint8_t state = !x.ref ? 0 : !*x.ref ? 1 : 2;
  T value = state == 2 ? **x.ref : T{};
  return f(caf::meta::type_name("clearable"), state, value,
           caf::meta::load_callback([&]() -> caf::error {
             switch (state) {
               case 0:
                 x.ref.reset();
                 return caf::none;
               case 1:
                 x.ref.emplace();
                 return caf::none;
               case 2:
                 x.ref = value;
                 return caf::none;
               default:
                 return wire_error(x.name, "out-of-range state " +
                                             std::to_string(+state));
             }
           }));
}

/// The mark of a serializer or deserializer that bounds every number itself,
/// as the journal's codec does (it clamps them into `sendable`'s range):
/// `finite` then leaves the numbers to it rather than refusing the record.
/// (CAF hands `inspect` the serializer's base class, so the mark is checked
/// at run time.)
class clamps_numbers {
public:
  virtual ~clamps_numbers() = default;
};

/// Whether `f` is marked `clamps_numbers`.
template<class Inspector>
bool clamps(const Inspector& f) noexcept {
  if constexpr (std::is_polymorphic_v<Inspector>)
    return dynamic_cast<const clamps_numbers*>(&f) != nullptr;
  else
    return false;
}

/// Inspects a number member in its usual wire shape; saving refuses a value
/// `sendable` refuses (the message is not sent), and so does loading (the
/// message is dropped, like any other that breaks a wire limit).
template<class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, number_field<T>& x) {
  auto check = [&]() -> caf::error {
    if (sendable(x.ref))
      return caf::none;
    return wire_error(
      x.name, "a number that is not finite or beyond " +
                std::to_string(static_cast<long long>(wire::max_number)));
  };
  decltype(auto) field = [&]() -> decltype(auto) {
    if constexpr (std::is_same_v<T, double>)
      return (x.ref);
    else if constexpr (std::is_same_v<T, std::optional<double>>)
      return opt(x.ref);
    else if constexpr (std::is_same_v<T, std::vector<double>>)
      return bounded(x.ref, x.name);
    else
      return clear_opt(x.ref, x.name);
  }();
  if (clamps(f))
    return f(field);
  return f(caf::meta::save_callback(check), field,
           caf::meta::load_callback(check));
}

} // namespace detail

/// Serializes an agent.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_spec& x) {
  return f(caf::meta::type_name("agent_spec"), x.agent_id, x.agent_cli,
           x.config_dir, x.cli_flags, detail::bounded(x.args, "agent.args"),
           x.prompt_as_argument, x.profile,
           detail::bounded(x.env_passthrough, "agent.env_passthrough"),
           x.output, detail::finite(x.idle_timeout_s, "agent.idle_timeout_s"),
           x.provider, detail::bounded(x.idle_noise, "agent.idle_noise"),
           x.account, caf::meta::load_callback([&]() -> caf::error {
             // Untrusted input: an output format this build does not know.
             if (static_cast<uint8_t>(x.output) >
                 static_cast<uint8_t>(output_format::gemini_json))
               return caf::make_error(caf::sec::invalid_argument,
                                      "agent_spec: output_format out of range");
             return detail::check_sizes(
               {{x.agent_id, wire::max_id_bytes, "agent.id"},
                {x.agent_cli, wire::max_text_bytes, "agent.agent_cli"},
                {x.config_dir, wire::max_text_bytes, "agent.config_dir"},
                {x.cli_flags, wire::max_text_bytes, "agent.cli_flags"},
                {x.profile, wire::max_id_bytes, "agent.profile"},
                {x.provider, wire::max_id_bytes, "agent.provider"},
                {x.account, wire::max_id_bytes, "agent.account"}});
           }));
}

/// Serializes token usage.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_usage& x) {
  return f(caf::meta::type_name("token_usage"), x.input_tokens, x.output_tokens,
           x.cached_input_tokens, caf::meta::load_callback([&]() -> caf::error {
             if (x.input_tokens < 0 || x.output_tokens < 0 ||
                 x.cached_input_tokens < 0)
               return detail::wire_error("token_usage", "a negative count");
             return caf::none;
           }));
}

/// Serializes a structured provider error.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, structured_error& x) {
  return f(caf::meta::type_name("structured_error"), x.http_status, x.type,
           x.message,
           detail::finite(x.retry_after_s, "structured_error.retry_after_s"));
}

/// Serializes what an agent's structured output said.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, structured_result& x) {
  return f(caf::meta::type_name("structured_result"), x.final_message,
           detail::opt(x.error), detail::opt(x.usage),
           detail::finite(x.cost_usd, "structured_result.cost_usd"));
}

/// Serializes an agent selection.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_selection& x) {
  return f(caf::meta::type_name("agent_selection"),
           detail::bounded(x.agents, "agents"),
           detail::bounded(x.agent_fallbacks, "agent_fallbacks"),
           detail::checked(x.mode, "agent_selection.mode"));
}

/// Serializes one class's backoff schedule.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, backoff_spec& x) {
  return f(caf::meta::type_name("backoff_spec"),
           detail::checked(x.kind, "backoff.kind"),
           detail::finite(x.table_s, "backoff.table_s"),
           detail::finite(x.initial_s, "backoff.initial_s"),
           detail::finite(x.multiplier, "backoff.multiplier"),
           detail::finite(x.max_s, "backoff.max_s"),
           detail::checked(x.jit, "backoff.jitter"));
}

/// Serializes restart intensity settings.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, intensity_config& x) {
  return f(caf::meta::type_name("intensity_config"), x.max_restarts,
           detail::finite(x.period_s, "intensity.period_s"),
           detail::finite(x.reset_after_s, "intensity.reset_after_s"));
}

/// Serializes the steps around each attempt.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_steps& x) {
  return f(caf::meta::type_name("attempt_steps"), x.preflight, x.gates,
           x.deliver);
}

/// Serializes a task's supervision policy.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_config& x) {
  return f(
    caf::meta::type_name("supervisor_config"), x.max_retries_per_agent,
    x.enable_fallback,
    detail::finite(x.backoff_base_seconds, "supervisor.backoff_base_seconds"),
    detail::finite(x.rate_limit_backoff_base,
                   "supervisor.rate_limit_backoff_base"),
    x.max_total_attempts, x.max_crash_restarts,
    detail::bounded(x.actions, "supervisor.actions"),
    detail::checked(x.restart, "supervisor.restart"), x.intensity,
    detail::bounded(x.backoff, "supervisor.backoff"),
    detail::finite(x.deadline_s, "supervisor.deadline_s"),
    detail::finite(x.stop_grace_s, "supervisor.stop_grace_s"),
    detail::checked(x.fatal, "supervisor.fatal_scope"),
    detail::finite(x.attempt_timeout_s, "supervisor.attempt_timeout_s"),
    detail::opt(x.done_exit_code), x.restart_backoff, x.steps,
    detail::opt_checked(x.on_quota, "supervisor.on_quota"),
    detail::finite(x.quota_wait_s, "supervisor.quota_wait_s"));
}

/// Serializes the restart intensity a task names.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, intensity_overrides& x) {
  return f(caf::meta::type_name("intensity_overrides"),
           detail::opt(x.max_restarts),
           detail::finite(x.period_s, "intensity.period_s"),
           detail::finite(x.reset_after_s, "intensity.reset_after_s"));
}

/// Serializes the supervisor settings a task names.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_overrides& x) {
  return f(
    caf::meta::type_name("supervisor_overrides"),
    detail::opt(x.max_retries_per_agent), detail::opt(x.enable_fallback),
    detail::finite(x.backoff_base_seconds, "supervisor.backoff_base_seconds"),
    detail::finite(x.rate_limit_backoff_base,
                   "supervisor.rate_limit_backoff_base"),
    detail::opt(x.max_total_attempts), detail::opt(x.max_crash_restarts),
    detail::bounded(x.actions, "supervisor.actions"),
    detail::opt_checked(x.restart, "supervisor.restart"), x.intensity,
    detail::bounded(x.backoff, "supervisor.backoff"),
    detail::finite(x.deadline_s, "supervisor.deadline_s"),
    detail::finite(x.stop_grace_s, "supervisor.stop_grace_s"),
    detail::opt_checked(x.fatal, "supervisor.fatal_scope"),
    detail::finite(x.attempt_timeout_s, "supervisor.attempt_timeout_s"),
    detail::clear_opt(x.done_exit_code, "supervisor.done_exit_code"),
    detail::opt(x.restart_backoff),
    detail::clear_opt(x.on_quota, "supervisor.on_quota"),
    detail::finite(x.quota_wait_s, "supervisor.quota_wait_s"),
    caf::meta::load_callback([&]() -> caf::error {
      if (x.on_quota && *x.on_quota && !detail::valid_enum_value(**x.on_quota))
        return detail::wire_error("supervisor.on_quota", "out-of-range value");
      return caf::none;
    }));
}

/// Serializes a classification rule.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classifier_rule& x) {
  return f(caf::meta::type_name("classifier_rule"), x.id,
           detail::checked(x.cls, "classifier_rule.class"),
           detail::bounded(x.exit_codes, "classifier_rule.exit_codes"),
           detail::opt(x.oom_killed),
           detail::bounded(x.signals, "classifier_rule.signals"),
           detail::bounded(x.patterns, "classifier_rule.patterns"),
           x.window_lines, x.match_all,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.id, wire::max_id_bytes, "classifier_rule.id"}});
           }));
}

/// The longest rule a classification carries: a rule's id, or
/// `node_lost:<node>` with a node name of up to 63 bytes.
inline constexpr std::size_t max_rule_bytes =
  wire::max_id_bytes + node_lost_rule_prefix.size();

/// Serializes a classification result. The lost node travels as its rule,
/// `node_lost:<node>` (the bytes of older builds and journals), and is
/// read back from it.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classification& x) {
  return f(caf::meta::type_name("classification"),
           detail::checked(x.cls, "classification.class"), x.rule, x.line,
           detail::finite(x.retry_after_s, "classification.retry_after_s"),
           caf::meta::load_callback([&]() -> caf::error {
             if (auto err = detail::check_sizes(
                   {{x.rule, max_rule_bytes, "classification.rule"},
                    {x.line, wire::max_text_bytes, "classification.line"}}))
               return err;
             x.lost_node.clear();
             std::string_view rule{x.rule};
             if (x.cls == error_class::infrastructure &&
                 rule.substr(0, node_lost_rule_prefix.size()) ==
                   node_lost_rule_prefix)
               x.lost_node = rule.substr(node_lost_rule_prefix.size());
             return caf::none;
           }));
}

/// Serializes a mount.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, mount_spec& x) {
  return f(
    caf::meta::type_name("mount_spec"), x.host_path, x.container_path,
    x.read_only, caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.host_path, wire::max_text_bytes, "mount.host_path"},
         {x.container_path, wire::max_text_bytes, "mount.container_path"}});
    }));
}

/// Serializes a repository.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, repo_spec& x) {
  return f(caf::meta::type_name("repo_spec"), x.path, x.base,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.path, wire::max_text_bytes, "repo.path"},
                {x.base, wire::max_text_bytes, "repo.base"}});
           }));
}

/// Serializes a gate, preflight or admit command.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, command_spec& x) {
  return f(caf::meta::type_name("command_spec"), x.name,
           detail::bounded(x.argv, "command.argv"),
           detail::finite(x.timeout_s, "command.timeout_s"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.name, wire::max_id_bytes, "command.name"}});
           }));
}

/// Serializes feedback settings.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, feedback_spec& x) {
  return f(caf::meta::type_name("feedback_spec"), x.enabled, x.template_text,
           x.lines, caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.template_text, wire::max_text_bytes, "feedback.template"}});
           }));
}

namespace detail {

/// A task's fields up to its placement, then `more` (the journal reads
/// older tasks, which had fewer, with the same list).
template<class Inspector, class... More>
typename Inspector::result_type inspect_spec(Inspector& f, task_spec& x,
                                             More&&... more) {
  return f(caf::meta::type_name("task_spec"), x.id, x.prompt, x.environment,
           opt(x.selection), x.supervisor, x.settings,
           opt_list(x.classifier_rules, "classifier_rules"), x.runtime, x.image,
           bounded(x.env, "env"), bounded(x.mounts, "mounts"), x.workdir,
           opt(x.memory_limit_mb), opt(x.repo), x.keep_failed,
           bounded(x.gates, "gates"), checked(x.deliver, "task.deliver"),
           x.feedback, opt(x.preflight), opt(x.admit),
           bounded(x.placement.labels, "placement.labels"),
           std::forward<More>(more)...,
           caf::meta::load_callback([&]() -> caf::error {
             return check_sizes(
               {{x.id, wire::max_id_bytes, "task.id"},
                {x.prompt, wire::max_prompt_bytes, "task.prompt"},
                {x.environment, wire::max_id_bytes, "task.environment"},
                {x.runtime, wire::max_id_bytes, "task.runtime"},
                {x.image, wire::max_text_bytes, "task.image"},
                {x.workdir, wire::max_text_bytes, "task.workdir"},
                {x.answer_schema, wire::max_text_bytes, "task.answer_schema"},
                {x.role, wire::max_id_bytes, "task.role"}});
           }));
}

} // namespace detail

/// Serializes a validated task.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_spec& x) {
  return detail::inspect_spec(f, x, x.answer_schema, x.role);
}

/// Serializes an attempt's outcome.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_outcome& x) {
  return f(caf::meta::type_name("attempt_outcome"), x.exit_code, x.signal,
           x.oom_killed, detail::bounded(x.tail, "outcome.tail"),
           detail::finite(x.duration_s, "outcome.duration_s"),
           detail::bounded(x.artifacts, "outcome.artifacts"),
           x.infrastructure_error, x.log_path, x.started, x.retry_futile,
           detail::opt(x.structured), x.lost_node,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.infrastructure_error, wire::max_text_bytes,
                 "outcome.infrastructure_error"},
                {x.lost_node, wire::max_id_bytes, "outcome.lost_node"},
                {x.log_path, wire::max_text_bytes, "outcome.log_path"}});
           }));
}

} // namespace tasksup

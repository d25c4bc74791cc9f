#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/role.hpp"
#include "tasksup/supervisor/schedule.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_spec.hpp"
#include "tasksup/supervisor/trigger.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// An agent environment (`config/environments/<name>.json`): its agents and
/// defaults for the tasks that name it.
struct environment_config {
  std::string name;
  agent_selection selection;
  /// Supervisor settings for tasks of this environment (over the globals),
  /// validated at load and kept as written so each task merges them.
  std::optional<boost::json::object> supervisor_overrides;
  /// Rules replacing the global ones for tasks of this environment.
  std::optional<std::vector<classifier_rule>> classifier_rules;
};

/// Node-wide settings (`config/node.json`): registry limits.
struct node_config {
  /// Attempts running at once on this node; further ones queue (FIFO).
  int max_concurrent = 4;
  circuit_breaker_config breaker;
  /// Retry budget; unlimited when unset.
  std::optional<double> retry_budget_capacity;
  double retry_budget_refill_per_s = 1.0;
  /// The agent used when a task names none.
  agent_spec default_agent;
  /// One of `runtime_names`.
  std::string default_runtime = "process";
  /// Output limits per attempt (`output` in node.json): the log file's cap,
  /// and the bytes per line and per attempt shown on the console and in
  /// `log` events; what is past them is counted, not kept.
  std::uint64_t output_log_max_bytes = 100 * 1024 * 1024;
  std::uint64_t output_line_max_bytes = 4 * 1024;
  std::uint64_t output_attempt_max_bytes = 1024 * 1024;
  /// Absolute directories a repository task's `repo` and a task's mounts
  /// must lie in (`allowed_paths` in node.json); empty: anywhere.
  std::vector<std::string> allowed_paths;
  /// The process runtime's shims (`process` in node.json): how long a
  /// task's shim waits idle for the task's next attempt (0: a shim per
  /// attempt), and how long a shim has to report the agent's start.
  double process_shim_idle_timeout_s = 10;
  double process_shim_report_timeout_s = 10;
};

/// Everything under a config directory, validated.
struct config_set {
  supervisor_config supervisor;
  std::vector<classifier_rule> classifier_rules;
  /// Keyed by name (the file stem).
  std::map<std::string, environment_config> environments;
  node_config node;
  /// User profiles (`profiles/<name>.json`), keyed by name; a file named
  /// after a built-in profile holds that profile with its overrides. Agents
  /// name these or the built-in ones (`find_agent_profile`).
  profile_map profiles;
  /// Roles (`roles/<name>.json`), their overlays applied, keyed by name.
  role_map roles;
  /// Webhook triggers (`triggers/<name>.json`), their secrets read, keyed
  /// by name.
  trigger_map triggers;
  /// Schedules (`schedules/<name>.json`), keyed by name; their tasks'
  /// relative agent paths resolved against the file.
  std::map<std::string, schedule_spec> schedules;
};

/// The built-in defaults: what an empty config directory loads to (default
/// supervisor settings, `default_classifier_rules()`, no environments).
config_set builtin_config();

// Each parse function takes the document and a `where` (file name or label)
// for its errors; unknown keys are errors; every error carries the JSON
// pointer of the offending value and what was expected there.

/// Parses supervisor settings over `base` (a partial object overrides only the
/// keys it names).
expected<supervisor_config>
parse_supervisor_config(const boost::json::value& doc, std::string_view where,
                        const supervisor_config& base = {});

/// Parses `{"rules": [...]}`.
expected<std::vector<classifier_rule>>
parse_classifier_rules(const boost::json::value& doc, std::string_view where);

/// Parses one environment object (`agents`, `agent_fallbacks`,
/// `selection_mode`, `supervisor`, `classifier`); its agents may name the
/// built-in profiles and those of `profiles`.
expected<environment_config>
parse_environment(const boost::json::value& doc, std::string_view where,
                  std::string name, const profile_map& profiles = {});

/// Parses node settings; `default_agent` may name a profile of `profiles`.
expected<node_config> parse_node_config(const boost::json::value& doc,
                                        std::string_view where,
                                        const profile_map& profiles = {});

/// Parses a task as written: the supervisor settings it names
/// (what a typed task carries), no environment applied, no cross-field
/// checks. `parse_task` is this plus `resolve_task`. Its agents'
/// profiles are applied here, from the built-in ones and `profiles` (the
/// node's `config_set::profiles`): a typed task carries its agents with
/// their profiles applied.
expected<task_spec> parse_task_as_written(const boost::json::value& doc,
                                          std::string_view where,
                                          const profile_map& profiles = {});

/// The one way in for a task, however it arrives (task file, `validate`,
/// `run`, JSON submit, typed submit from an embedding application or another
/// node): resolves `task` against the node's config, then checks the result
/// with `validate_task`.
///
/// - Environment: the one the task names (unknown is an error at
///   `/environment`), else `default` when `cfg` has one.
/// - Supervisor settings (`task.settings`): built-in defaults <
///   `cfg.supervisor` < the environment's `supervisor` < the settings the
///   task names (`task.supervisor`, a `supervisor_overrides`: what it does
///   not name is the layer below's, a value equal to the built-in default
///   counts, a cleared optional setting is off). Per-class `actions` count
///   class by class, a per-class `backoff` entry replaces the one below it.
/// - Agent selection and classifier rules: the task's own, else the
///   environment's (a selection only when it has agents).
///
/// Resolving a resolved task changes nothing. Errors name `where` and the
/// JSON path of the offending field.
expected<task_spec> resolve_task(task_spec task, const config_set& cfg,
                                 std::string_view where);

/// Parses a task and resolves it against `cfg`: `parse_task_as_written`
/// (with `cfg.profiles`) then `resolve_task`. `id` stays empty when the
/// document has none.
expected<task_spec> parse_task(const boost::json::value& doc,
                               std::string_view where, const config_set& cfg);

/// The one task validator: checks a resolved task against every limit a
/// task must meet to run, whichever way it arrived: ids and names, every
/// enum in range, numbers, paths, text (valid UTF-8, no NUL bytes), and
/// what fits in the `execve` of an attempt: the prompt at most
/// `max_prompt_bytes`, each argument and `KEY=value` at most
/// `max_argument_bytes`, all of them together at most `max_command_bytes`.
/// True when valid; the error names `where` and the JSON path of the
/// offending field.
expected<bool> validate_task(const task_spec& task, std::string_view where);

/// What is allowed but likely unintended in a valid task, one sentence
/// each naming its field (`validate` prints them, a task's start emits
/// them as warning events): a `workdir` every attempt shares.
std::vector<std::string> task_warnings(const task_spec& task);

/// Linux's limit on one argument or environment string (MAX_ARG_STRLEN,
/// 128 KiB) less its terminating NUL.
inline constexpr std::size_t max_argument_bytes = 128 * 1024 - 1;

/// The longest prompt: it must fit one argument, or one environment
/// variable `TASKSUP_PROMPT=...` for agents with `prompt_as_argument` false.
inline constexpr std::size_t max_prompt_bytes =
  max_argument_bytes - (sizeof("TASKSUP_PROMPT=") - 1);

/// The prompt, the agent's command and arguments and the task's `env`
/// together, well under the usual ARG_MAX (2 MiB) that they share with the
/// node's own environment.
inline constexpr std::size_t max_command_bytes = 1024 * 1024;

/// Reads and parses JSON text; syntax errors name line and column.
expected<boost::json::value> parse_json_text(std::string_view text,
                                             std::string_view where);

/// Reads a file and parses it as JSON; errors name the file.
expected<boost::json::value> read_json_file(const std::string& path);

/// Parses schedule `name` (`schedules/<name>.json`, or one added by
/// `tasksup schedule add`) and checks its task as a run of it would be
/// submitted against `cfg`: errors name `where` and the JSON pointer (the
/// task's under `/task`).
expected<schedule_spec> check_schedule(const boost::json::value& doc,
                                       const std::string& name,
                                       const std::string& where,
                                       const config_set& cfg);

/// Loads a config directory: supervisor.json, classifier.json,
/// profiles/*.json (first: node.json and the environments may name them),
/// roles/*.json, triggers/*.json (their secret files relative to `dir`),
/// schedules/*.json (last: their tasks are checked against the rest),
/// node.json and environments/*.json (each optional; built-in defaults where
/// absent). Errors name the file. A profile's relative `agent_cli` with a
/// `/` is relative to the profiles directory.
expected<config_set> load_config_dir(const std::string& dir);

/// Loads the user profiles of a directory (`dir/*.json`, see
/// `parse_user_profile`); a missing directory has none. Errors name the
/// file and the JSON pointer.
expected<profile_map> load_profiles_dir(const std::string& dir);

/// Makes each relative `agent_cli` that contains a `/` (`./agents/x`)
/// absolute, relative to the directory of `file`, the config or task file
/// that named it; bare command names (looked up in PATH) and absolute paths
/// stay as they are.
void resolve_agent_paths(std::vector<agent_spec>& agents,
                         const std::string& file);

/// Loads a task file against `cfg`. Relative agent paths of the task's own
/// `agent_selection` are resolved against the task file's directory (see
/// `resolve_agent_paths`); load_config_dir does the same for environments and
/// node.json.
expected<task_spec> load_task_file(const std::string& path,
                                   const config_set& cfg);

} // namespace tasksup

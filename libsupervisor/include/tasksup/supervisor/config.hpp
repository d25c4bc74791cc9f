#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <boost/json/value.hpp>

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
  /// "process" or "docker".
  std::string default_runtime = "process";
  /// Output limits per attempt (`output` in node.json): the log file's cap,
  /// and the bytes per line and per attempt shown on the console and in
  /// `log` events; what is past them is counted, not kept.
  std::uint64_t output_log_max_bytes = 100 * 1024 * 1024;
  std::uint64_t output_line_max_bytes = 4 * 1024;
  std::uint64_t output_attempt_max_bytes = 1024 * 1024;
};

/// Everything under a config directory, validated.
struct config_set {
  supervisor_config supervisor;
  std::vector<classifier_rule> classifier_rules;
  /// Keyed by name (the file stem).
  std::map<std::string, environment_config> environments;
  node_config node;
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
/// `selection_mode`, `supervisor`, `classifier`).
expected<environment_config> parse_environment(const boost::json::value& doc,
                                               std::string_view where,
                                               std::string name);

/// Parses node settings.
expected<node_config> parse_node_config(const boost::json::value& doc,
                                        std::string_view where);

/// Parses a task (SPEC §12) against the loaded config: environment defaults
/// and supervisor overrides are merged; an unknown environment is an error.
/// A task naming no environment uses the `default` environment when `cfg`
/// has one. Supervisor settings merge global < environment < task; the
/// selection and classifier rules are the task's own, else the
/// environment's. `id` stays empty when the file has none.
expected<task_spec> parse_task(const boost::json::value& doc,
                               std::string_view where, const config_set& cfg);

/// Checks a task that arrived already built (a typed `submit` from another
/// node or an embedding application) against the limits `parse_task`
/// enforces on JSON: ids, agents, supervisor numbers, classifier rules,
/// paths, env. True when valid; the error names `where` and the JSON path of
/// the offending field.
expected<bool> validate_task(const task_spec& task, std::string_view where);

/// Reads and parses JSON text; syntax errors name line and column.
expected<boost::json::value> parse_json_text(std::string_view text,
                                             std::string_view where);

/// Reads a file and parses it as JSON; errors name the file.
expected<boost::json::value> read_json_file(const std::string& path);

/// Loads a config directory: supervisor.json, classifier.json, node.json and
/// environments/*.json (each optional; built-in defaults where absent).
/// Errors name the file.
expected<config_set> load_config_dir(const std::string& dir);

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

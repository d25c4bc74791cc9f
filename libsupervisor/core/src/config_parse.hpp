#pragma once

// The readers of each config section and of tasks, shared by the public
// parse functions, the file loader and the validator. Internal to
// libsupervisor.

#include "config_reader.hpp"

#include "tasksup/supervisor/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace tasksup::detail {

/// Reads the supervisor settings named at `path`. A per-class `backoff`
/// entry and `restart_backoff` are read over `base`'s schedule (a partial
/// schedule keeps the fields it does not name), or without `base` (a task's
/// own settings) over a fresh one: `backoff_spec{}`,
/// `default_restart_backoff()`.
supervisor_overrides read_overrides(const reader& r, const json::value& v,
                                    const std::string& path,
                                    const supervisor_config* base);

/// Reads supervisor settings at `path` over `cfg` (keys it does not name keep
/// their value).
void read_supervisor(const reader& r, const json::value& v,
                     const std::string& path, supervisor_config& cfg);

/// Reads `{"rules": [...]}` at `path` and compiles the rules once.
std::vector<classifier_rule> read_rules(const reader& r, const json::value& v,
                                        const std::string& path);

/// Reads one agent object.
agent_spec read_agent(const reader& r, const json::value& v,
                      const std::string& path);

/// Reads an environment document; its supervisor overrides are checked over
/// `base`.
environment_config read_environment(const reader& r, const json::value& v,
                                    std::string name,
                                    const supervisor_config& base);

/// Reads a node.json document.
node_config read_node(const reader& r, const json::value& v);

/// Reads a task document as written: the supervisor settings it
/// names, no environment applied.
task_spec read_task(const reader& r, const json::value& v);

/// A command: a string split like `cli_flags`, an argv array, or an object
/// `{"name", "command", "timeout_s"}` whose `command` is either.
command_spec read_command(const reader& r, const json::value& v,
                          const std::string& path, double default_timeout_s);

/// A JSON Schema (an answer's), compiled to check it (errors at `path` and
/// the pointer within), kept as compact JSON text.
std::string read_schema(const reader& r, const json::value& v,
                        const std::string& path);

/// `validate_task`; `compile_rules` false skips compiling the classifier
/// patterns again (rules an environment supplied were compiled at load).
expected<bool> check_task(const task_spec& task, std::string_view where,
                          bool compile_rules);

} // namespace tasksup::detail

#pragma once

// Roles (`config/roles/<name>.json`): what a kind of task (a planner, an
// implementer, a reviewer) is asked and must answer. A task names its
// `role`; the role's prompt template wraps the task's prompt and packed
// context, its answer schema checks the answer, its gates check the work
// (docs/BEHAVIOUR.md, Roles).

#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// The longest chain of `base_role` overlays.
inline constexpr std::size_t max_role_depth = 8;

/// How much context (`target_files`, `extra_context`) goes into a prompt
/// unless the task says (`context_max_bytes`), and the most it may say.
inline constexpr std::size_t default_context_bytes = 64 * 1024;
inline constexpr std::size_t max_context_bytes = 96 * 1024;

/// The names a role's prompt template may use.
inline constexpr std::string_view role_template_names[] = {"prompt", "context",
                                                           "answer_schema"};

/// A role with its overlays applied.
struct role_spec {
  std::string name;
  /// The role it overlays, as written; empty for none.
  std::string base_role;
  std::string description;
  /// `{{prompt}}` (the task's prompt), `{{context}}` (the packed context)
  /// and `{{answer_schema}}` (the schema, as JSON) are replaced; nothing
  /// else is. Empty: the task's prompt, then its context.
  std::string prompt_template;
  /// Draft 7 JSON Schema as compact JSON; empty for none.
  std::string answer_schema;
  /// The gates of a repository task that names none.
  std::optional<std::vector<command_spec>> gates;
};

using role_map = std::map<std::string, role_spec>;

/// Parses one role file as written (`base_role` not applied). Errors name
/// `where` and the JSON pointer.
expected<role_spec> parse_role(const boost::json::value& doc,
                               std::string_view where, std::string name);

/// Applies each role's `base_role` chain: a key a role names replaces its
/// base's. Errors name the role's file: an unknown base, a cycle (its
/// roles in order), a chain deeper than `max_role_depth`.
expected<role_map> resolve_roles(role_map roles, const std::string& dir);

/// Loads `dir/*.json`, each file a role named by its stem, and resolves
/// them; a missing directory has none.
expected<role_map> load_roles_dir(const std::string& dir);

/// `text` with each `{{name}}` of `values` replaced, in one pass (the
/// replacements are not scanned again).
std::string render_template(
  std::string_view text,
  const std::vector<std::pair<std::string_view, std::string_view>>& values);

/// Applies a task document's `role`, `target_files`, `extra_context` and
/// `context_max_bytes` to `task` (already read from `doc`): packs the
/// context, renders the role's template, takes its schema and gates where
/// the task has none. Errors name `where` and the JSON pointer.
expected<bool> apply_role(task_spec& task, const boost::json::object& doc,
                          const role_map& roles, std::string_view where);

} // namespace tasksup

#pragma once

#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/group_machine.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

struct group_spec;

/// One member of a group: a task or a group, with what the group needs to
/// know of it.
struct group_member_spec {
  /// The task's or the group's id.
  std::string id;
  /// A task member's `supervisor.restart` (default `transient`); a group
  /// member's `restart` (default `permanent`, as an OTP supervisor child).
  restart_type restart = restart_type::permanent;
  /// `"significant": true`: its end may end the group (`auto_shutdown`).
  bool significant = false;
  /// Set for a task member: the task, resolved against the node's config.
  std::optional<task_spec> task;
  /// Set for a group member.
  std::shared_ptr<const group_spec> group;
  /// A workflow's step: the members (indexes) it depends on, and whether
  /// its failure lets its dependents run (`continue_on_failure`).
  std::vector<std::size_t> depends_on = {};
  bool continue_on_failure = false;
};

/// A group (`{"group": {...}}`): members supervised together with one of
/// OTP's strategies; or a workflow (`{"id": ..., "steps": [...]}`), read as
/// a group of strategy `steps` whose members are its steps' tasks.
struct group_spec {
  std::string id;
  group_strategy strategy = group_strategy::one_for_one;
  group_intensity intensity;
  tasksup::auto_shutdown shutdown = tasksup::auto_shutdown::never;
  std::vector<group_member_spec> members;

  /// What the group machine needs of it.
  group_shape shape() const;
};

/// The most members of one group.
inline constexpr std::size_t max_group_members = 10000;

/// The most members of a whole tree (groups and tasks at every level).
inline constexpr std::size_t max_tree_members = 100000;

/// The deepest nesting of groups (the top group is level 1).
inline constexpr std::size_t max_group_depth = 16;

/// Whether `doc` is a group document: an object whose only key is
/// `"group"`, or a workflow: an object with `"steps"`.
bool is_group_document(const boost::json::value& doc);

/// Whether `doc` is a workflow document (an object with `"steps"`).
bool is_workflow_document(const boost::json::value& doc);

/// One `{{steps.<step>.<field>}}` in a workflow step's prompt.
struct step_template {
  /// As written, braces included.
  std::string text;
  std::string step;
  std::string field;
  /// Whether it has that form (a step id, a dot, a field, closed).
  bool valid = false;
};

/// The templates naming steps in `text`, in order.
std::vector<step_template> find_step_templates(std::string_view text);

/// The most steps of one workflow.
inline constexpr std::size_t max_workflow_steps = max_group_members;

/// The most attempts a best-of-N step (`"best_of": N`) runs at once.
inline constexpr int max_best_of = 8;

/// The task a workflow step runs: its own, or for a best-of-N step (a
/// nested group of strategy `race`) its first racer's, of which the others
/// are copies with the agent chain rotated. Null for a group member of an
/// OTP group.
const task_spec* step_task(const group_member_spec& m);

/// The task id of racer `k` (1-based) of the best-of-N step whose task id is
/// `step`: "<step>.<k>".
std::string racer_task_id(std::string_view step, int k);

/// Parses a group document (`{"group": {...}}`) and resolves each task
/// member against `cfg` (as `parse_task` does). Errors name `where` and the
/// JSON pointer: a group that contains itself (a nested group with the id
/// of a group above it), an id used twice anywhere in the tree, a
/// significant member where OTP refuses one (`auto_shutdown` `never`, or a
/// `permanent` member), intensity out of range, and every error of the
/// member tasks (their pointers within the group document).
///
/// A workflow document (`{"id": ..., "steps": [{"id", "task",
/// "depends_on", "continue_on_failure", "best_of"}, ...]}`) gives a group of
/// strategy `steps`: each step's task is a `temporary` member whose task id
/// is "<workflow id>.<step id>". A step with `"best_of": N` (2 to
/// `max_best_of`) is instead a nested group of strategy `race` with that id,
/// whose N `temporary` members are copies of the task with ids
/// "<step task id>.1" to ".N", the k-th with its agent chain rotated by k-1
/// (round-robin). Errors name the pointer of a duplicate step id, an
/// unknown step in `depends_on`, a step that depends on itself or on a step
/// twice, a cycle (naming its steps), a task id too long, `best_of` out of
/// range, a step id taken by another step's racers, and every error of the
/// steps' tasks.
expected<group_spec> parse_group(const boost::json::value& doc,
                                 std::string_view where, const config_set& cfg);

/// Reads and parses a group file; relative agent paths of its tasks' own
/// `agent_selection` are resolved against the file's directory.
expected<group_spec> load_group_file(const std::string& path,
                                     const config_set& cfg);

/// Every id in the tree, groups and tasks, in start order (each group
/// before its members).
std::vector<std::string> tree_ids(const group_spec& g);

/// The groups of `top`'s tree, `top` first, each before its nested ones.
std::vector<const group_spec*> tree_groups(const group_spec& top);

/// The task id of step `step` of workflow `workflow`: "<workflow>.<step>".
std::string step_task_id(std::string_view workflow, std::string_view step);

} // namespace tasksup

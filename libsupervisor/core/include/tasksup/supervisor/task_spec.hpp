#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/placement.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// The runtimes a task (`runtime`), a node (`default_runtime`) and the CLI
/// (`--runtime`) can name, spelled once.
inline constexpr std::array<std::string_view, 2> runtime_names{"process",
                                                               "docker"};

/// True when `name` is one of `runtime_names`.
constexpr bool known_runtime(std::string_view name) noexcept {
  for (auto x : runtime_names)
    if (x == name)
      return true;
  return false;
}

/// `runtime_names` as `"process", "docker"`, for messages.
inline std::string runtime_name_list() {
  std::string out;
  for (auto x : runtime_names) {
    if (!out.empty())
      out += ", ";
    out += '"';
    out += x;
    out += '"';
  }
  return out;
}

/// A host path made visible to an attempt.
struct mount_spec {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
};

/// How a repository task's change reaches the repository once its gates
/// passed.
enum class delivery_mode : std::uint8_t {
  /// Committed on the branch `tasksup/<task id>` (the default).
  branch,
  /// Applied to the repository's working tree (not committed).
  apply,
  /// Left as the patch artifact only.
  patch,
};

/// "branch", "apply" or "patch".
std::string_view to_string(delivery_mode x) noexcept;

/// Parses the names above; nullopt for anything else.
std::optional<delivery_mode> parse_delivery_mode(std::string_view str) noexcept;

/// A git repository a task changes: every attempt works in a fresh worktree
/// (or checkout) of `base`.
struct repo_spec {
  /// Absolute path of the repository (its work tree or a bare repository).
  std::string path;
  /// What each attempt starts from: a branch, tag or commit.
  std::string base = "HEAD";
};

/// Longest timeout of a gate, preflight or admit command: one day.
inline constexpr double max_command_timeout_s = 86400.0;

/// A command tasksup runs itself (a gate, the preflight, an admit check):
/// argv, never a shell unless argv names one.
struct command_spec {
  /// For events and feedback: the command's `name`, or its argv[0].
  std::string name;
  std::vector<std::string> argv;
  /// Stopped (SIGTERM, then SIGKILL) after this many seconds.
  double timeout_s = 600.0;
};

/// What the next attempt is told about the previous one's failure.
struct feedback_spec {
  /// Off: no file, nothing appended to the prompt. A task file turns it on
  /// for repository tasks unless it says otherwise.
  bool enabled = false;
  /// Appended to the prompt; `{attempt}`, `{reason}` and `{output}` are
  /// replaced. Empty: `default_feedback_template`.
  std::string template_text;
  /// Lines of output (the failing gate's, else the attempt's) passed on.
  int lines = 40;
};

/// The feedback template used when a task names none.
inline constexpr std::string_view default_feedback_template =
  "\n\n---\nThe previous attempt ({attempt}) was rejected: {reason}\n"
  "Its last output lines:\n{output}\n"
  "You start again from a clean checkout; none of its edits are kept.";

/// Where a task's attempts may run in a cluster.
struct placement_spec {
  /// Labels the worker node must carry (`--label KEY=VALUE`), all of them.
  label_map labels;
};

/// The fields of a task every attempt is built from: what a task
/// supervisor keeps of its `task_spec` for the task's whole life.
struct task_attempt_fields {
  /// Generated when the task file has none.
  std::string id;
  std::string prompt;
  /// Names the agent environment (rotation, defaults); empty for none.
  std::string environment;
  /// Container image (docker runtime).
  std::string image;
  std::map<std::string, std::string> env;
  std::vector<mount_spec> mounts;
  /// Working directory inside the container / a fixed one for processes;
  /// empty means a fresh directory per attempt.
  std::string workdir;
  std::optional<std::uint64_t> memory_limit_mb;
};

/// A task's repository, gates, preflight and feedback: what a task
/// supervisor keeps of its `task_spec` when it has any of them.
struct task_hook_fields {
  /// A repository task: fresh worktree per attempt, gates, delivery.
  std::optional<repo_spec> repo;
  /// Keep the worktree (or checkout) of a failed attempt for inspection.
  bool keep_failed = false;
  /// Run in the attempt's worktree after it exits 0, in order; all must
  /// pass (exit 0 within their timeout) for the attempt to succeed.
  std::vector<command_spec> gates;
  delivery_mode deliver = delivery_mode::branch;
  feedback_spec feedback;
  /// Run before each attempt; a non-zero exit skips that attempt
  /// (`preflight_failed`).
  std::optional<command_spec> preflight;
  /// The JSON Schema (draft 7, as compact JSON text) the attempt's answer
  /// must match (the task's `answer_schema`, else its role's); empty for
  /// none.
  std::string answer_schema;
};

/// One task as submitted (docs/BEHAVIOUR.md, Task file). `resolve_task` checks
/// every field and computes `settings`, the policy it runs under. Its
/// attempt and hook fields are in the two bases, which a task supervisor
/// keeps apart from the rest (`id`, `prompt`, ... read as members).
struct task_spec : task_attempt_fields, task_hook_fields {
  /// The role the task was made from (`config/roles/<role>.json`); empty
  /// for none. Its template, schema and gates are already applied.
  std::string role;
  /// Inline agent selection; overrides the environment's when present.
  std::optional<agent_selection> selection;
  /// The supervisor settings the task itself names (its `supervisor`
  /// object); nothing set means the environment's and the node's.
  supervisor_overrides supervisor;
  /// The policy the task runs under: set by `resolve_task` (built-in
  /// defaults < `supervisor.json` < the environment's `supervisor` <
  /// `supervisor` above). A supervisor spawned directly from an unresolved
  /// task runs under these (the built-in defaults) with `supervisor` applied
  /// over them (`effective_settings`).
  supervisor_config settings;
  /// Per-task classifier rules replacing the environment's/global ones.
  std::optional<std::vector<classifier_rule>> classifier_rules;
  /// One of `runtime_names`; empty means the node's default.
  std::string runtime;
  /// Run once at submission, after the built-in checks; a non-zero exit
  /// rejects the task.
  std::optional<command_spec> admit;
  /// Which worker nodes may run its attempts (ignored on a node alone).
  placement_spec placement;
};

/// The policy `task` runs under: `settings` with the task's own
/// `supervisor` overrides applied over them (for a resolved task, exactly
/// `settings`).
supervisor_config effective_settings(const task_spec& task);

} // namespace tasksup

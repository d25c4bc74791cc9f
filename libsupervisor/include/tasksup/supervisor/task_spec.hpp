#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/classifier.hpp"
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

/// One task as submitted (SPEC §12), after validation: every field checked,
/// `supervisor` already merged over the environment's and global defaults.
struct task_spec {
  /// Generated when the task file has none.
  std::string id;
  std::string prompt;
  /// Names the agent environment (rotation, defaults); empty for none.
  std::string environment;
  /// Inline agent selection; overrides the environment's when present.
  std::optional<agent_selection> selection;
  supervisor_config supervisor;
  /// Per-task classifier rules replacing the environment's/global ones.
  std::optional<std::vector<classifier_rule>> classifier_rules;
  /// One of `runtime_names`; empty means the node's default.
  std::string runtime;
  /// Container image (docker runtime).
  std::string image;
  std::map<std::string, std::string> env;
  std::vector<mount_spec> mounts;
  /// Working directory inside the container / a fixed one for processes;
  /// empty means a fresh directory per attempt.
  std::string workdir;
  std::optional<std::uint64_t> memory_limit_mb;
};

} // namespace tasksup

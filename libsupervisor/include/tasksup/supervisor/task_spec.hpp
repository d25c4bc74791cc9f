#pragma once

#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tasksup {

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
  /// "process" or "docker"; empty means the node's default.
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

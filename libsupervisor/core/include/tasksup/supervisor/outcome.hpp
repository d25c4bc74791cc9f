#pragma once

#include "tasksup/supervisor/agent_output.hpp"

#include <optional>
#include <string>
#include <vector>

namespace tasksup {

/// How one attempt ended, as reported by a runtime.
struct attempt_outcome {
  /// Exit code; a process killed by signal N reports 128+N.
  int exit_code = 0;
  /// The signal that killed the process, 0 when it exited normally.
  int signal = 0;
  /// True when the kernel or the engine killed it for exceeding its memory.
  bool oom_killed = false;
  /// The last lines of its combined output, oldest first; bounded by the
  /// runtime (each line truncated, at most a few hundred lines).
  std::vector<std::string> tail;
  /// Wall time from start to exit, in seconds.
  double duration_s = 0;
  /// Host paths of the files the attempt left in its artifacts directory.
  std::vector<std::string> artifacts;
  /// Non-empty when the runtime itself failed to start or watch the attempt
  /// (engine unreachable, spawn failure other than a missing agent, worker
  /// died); such an outcome classifies as `infrastructure` with this text.
  std::string infrastructure_error;
  /// The worker node that was lost while the attempt ran there (killed,
  /// frozen, cut off); such an outcome classifies as `infrastructure` with
  /// the rule `node_lost:<node>` and is retried at once, elsewhere.
  std::string lost_node;
  /// Where the full output of this attempt was saved, empty if nowhere.
  std::string log_path;
  /// False when the runtime could not start the attempt at all (spawn
  /// failed, image missing): nothing ran, and `exit_code` means nothing.
  bool started = true;
  /// True when the runtime knows that starting the attempt again cannot
  /// succeed (the image is not on this host and tasksup never pulls): the
  /// agent is given up at once instead of retried.
  bool retry_futile = false;
  /// What the agent's structured output said (final message, provider
  /// error, usage, cost), for agents whose profile names an output format.
  std::optional<structured_result> structured;

  /// Exit 0 without an infrastructure error: success, never classified,
  /// even when `oom_killed` is set: a memory cgroup reports an OOM
  /// kill of any process in it, and an agent that recovered from a killed
  /// helper and exited 0 has succeeded.
  bool succeeded() const noexcept {
    return exit_code == 0 && infrastructure_error.empty();
  }
};

} // namespace tasksup

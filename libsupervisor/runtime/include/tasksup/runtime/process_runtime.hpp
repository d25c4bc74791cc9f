#pragma once

#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/runtime.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime {

/// Settings of the process runtime (SPEC §10: the agent runs as a child
/// process in its own process group).
struct process_runtime_options {
  /// Receives operator-facing warnings (e.g. "memory limits are not enforced:
  /// ..."); may be called from any thread, never concurrently. Empty: dropped.
  std::function<void(std::string_view message)> on_warning;

  /// Variables copied from the supervisor's own environment into every
  /// attempt (when set there); any variable starting with `LC_` is copied as
  /// well. Everything else the attempt sees comes from `attempt_spec::env` and
  /// the TASKSUP_* variables.
  std::vector<std::string> inherited_env = {
    "PATH", "HOME",   "USER", "LOGNAME", "LANG",          "LANGUAGE",
    "TZ",   "TMPDIR", "TERM", "SHELL",   "SSL_CERT_FILE", "SSL_CERT_DIR",
  };

  /// How long to keep reading output after the agent exited and its process
  /// group was killed, for a process outside the group that still holds the
  /// output pipe.
  std::chrono::milliseconds drain_timeout{2000};

  /// How long to wait, after the agent exited, for the killed rest of its
  /// process group (and memory cgroup) to disappear before reporting anyway.
  std::chrono::milliseconds group_exit_timeout{5000};

  /// Makes the supervisor a child subreaper (PR_SET_CHILD_SUBREAPER) so that
  /// processes orphaned by an agent are reparented to it and reaped when their
  /// attempt ends, instead of lingering as zombies under an init that does
  /// not reap. Process-wide; turn off when the embedding program manages
  /// orphans itself.
  bool child_subreaper = true;

  /// What each attempt's output may cost: the log file's cap and what is
  /// passed to `on_line` per line and per attempt (the rest is counted and
  /// reported through `on_notice`).
  output_capture_limits output_limits;

  /// Name of the cgroup, below the supervisor's own memory cgroup, that holds
  /// one cgroup per attempt with a memory limit.
  std::string cgroup_name = "tasksup";
};

/// Creates a process runtime with its own reactor thread (epoll over pidfds
/// and output pipes); thousands of concurrent attempts share that thread.
/// Raises the soft RLIMIT_NOFILE to the hard limit. Destroying the runtime
/// kills every attempt still running, reports their outcomes and joins the
/// thread.
std::shared_ptr<container_runtime>
make_process_runtime(process_runtime_options options = {});

} // namespace tasksup::runtime

#pragma once

#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/runtime.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime {

/// What happens to a running attempt when the program that started it dies
/// without stopping it (crash, SIGKILL).
enum class orphan_policy : std::uint8_t {
  /// The shim kills the agent's process group (it sees its stdin pipe from
  /// the runtime hang up) and records the exit: nothing outlives the
  /// program. For `tasksup run` and embedding programs.
  kill,
  /// The shim outlives the program: it keeps logging the agent's output and
  /// records its exit, so a restarted node can `adopt` the attempt. For
  /// `tasksup serve`.
  keep,
};

/// Settings of the process runtime. Each attempt runs under a
/// `tasksup-shim` process (like conmon): the shim starts the
/// agent in its own process group, holds its output pipes, writes
/// `output.log`, `output.streams` (which stream each byte came from),
/// `shim.pid` (the shim's and the agent's pid and start time) and, at the
/// end, `exit.status` into the attempt directory, and forwards the output to
/// the runtime while the runtime is there. Stop and kill are asked of the
/// shim (SIGTERM, SIGUSR1 through a pidfd, so a reused pid is never hit);
/// the shim signals the agent's group.
struct process_runtime_options {
  /// The tasksup-shim program. Empty: $TASKSUP_SHIM, else `tasksup-shim`
  /// next to the running program, else the one in the build tree or the
  /// install prefix this library was built for.
  std::string shim_path;

  /// What a shim does when this program dies under it.
  orphan_policy orphans = orphan_policy::kill;

  /// How long a task's shim waits, after an attempt, for the task's next
  /// one. The attempts of a task (attempt directories in one directory)
  /// run one after another under one long-lived shim (`tasksup-shim
  /// --serve`), so an attempt costs one process start, the agent's; an idle
  /// shim exits after this long. Zero: a new shim for every attempt.
  std::chrono::milliseconds shim_idle_timeout{10000};

  /// How long a shim has to report that it started the agent (or could
  /// not). One that does not is told to kill the agent's group and end, and
  /// is killed itself if it does not, with the group its record names; the
  /// attempt fails with an infrastructure error. `start` does not wait for
  /// a task's shim to report (the runtime's thread reads the report, and
  /// the agent's pid comes through `attempt_callbacks::on_started`); with a
  /// shim per attempt it does.
  std::chrono::milliseconds shim_report_timeout{10000};

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

/// Creates `dir` (with its missing parents, mode 0700) and, where the file
/// system keeps the flag (ext2/3/4), marks it as the top of a directory
/// hierarchy, so that each directory made in it starts in a fresh block group,
/// away from the inodes earlier runs deleted, which ext4's allocator would
/// otherwise skip one by one (BENCHMARKS.md §3). For the directory that holds
/// attempt roots. Best effort: other file systems refuse or ignore the flag.
void make_top_directory(const std::string& dir);

} // namespace tasksup::runtime

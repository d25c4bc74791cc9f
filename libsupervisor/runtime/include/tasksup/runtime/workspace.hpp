#pragma once

// Repository tasks on the host: a fresh git worktree per attempt, commands
// run with a timeout and their output captured (gates, preflight, admit),
// the attempt's change captured as a patch and delivered. Every call blocks
// until git or the command is done: call it from a thread of its own (the
// actors use a detached workspace actor), never from a reactor. git runs
// with argv, never through a shell; operations that change a repository's
// administrative files are serialized per repository within this process.

#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <atomic>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace tasksup::runtime {

/// How a command run by `run_command` ended.
struct command_result {
  /// The exit code; 128+N when killed by signal N; -1 when it never ran.
  int exit_code = -1;
  /// Stopped after its timeout.
  bool timed_out = false;
  /// Stopped because the caller cancelled it.
  bool cancelled = false;
  /// Why it could not run (empty when it ran).
  std::string error;
  /// Its last output lines (stdout and stderr interleaved), oldest first.
  std::vector<std::string> tail;

  /// Exited 0 within its timeout.
  bool passed() const noexcept {
    return error.empty() && !timed_out && !cancelled && exit_code == 0;
  }

  /// The last output line, or why it did not run.
  std::string last_line() const;
};

/// What `run_command` runs.
struct command_options {
  std::vector<std::string> argv;
  /// Working directory; empty: the current one.
  std::string cwd;
  /// Added to (or replacing in) this process's environment.
  std::map<std::string, std::string> env;
  /// SIGTERM after this many seconds, SIGKILL 2 s later (0: no limit).
  double timeout_s = 0;
  /// Lines kept in `command_result::tail`.
  std::size_t tail_lines = 40;
  /// When set, the whole stdout goes to this file (not to the tail).
  std::string stdout_path;
  /// When set, the whole output is appended to this file.
  std::string log_path;
  /// Checked while it runs: true stops it at once (SIGKILL).
  const std::atomic<bool>* cancel = nullptr;
};

/// Runs a command in its own process group, argv[0] looked up in PATH.
command_result run_command(const command_options& opts);

/// What `capture_change` found.
struct change {
  /// The attempt changed nothing.
  bool empty = true;
  /// Paths changed, for messages.
  std::vector<std::string> files;
};

/// The branch task `task_id` delivers to: `tasksup/<task id>`.
inline std::string delivery_branch(const std::string& task_id) {
  return "tasksup/" + task_id;
}

/// A repository task's worktree for one attempt.
class repo_workspace {
public:
  /// For repository `repo` (validated task keys) and the task `task_id`.
  repo_workspace(repo_spec repo, std::string task_id);

  /// The full commit id `base` names in the repository.
  expected<std::string> resolve_base() const;

  /// Adds a locked, detached worktree at `dir` (which must not exist or be
  /// empty) checked out at `commit`.
  expected<bool> add(const std::string& dir, const std::string& commit) const;

  /// Removes the worktree at `dir` (and its administrative files); a
  /// missing one is not an error.
  expected<bool> remove(const std::string& dir) const;

  /// Stages everything the attempt changed in `dir` and writes the diff
  /// against `commit` (binary-safe, new files included) to `patch_path`.
  expected<change> capture_change(const std::string& dir,
                                  const std::string& commit,
                                  const std::string& patch_path) const;

  /// Commits the staged change in `dir` with `message` and creates the
  /// branch `branch` at that commit in the repository; fails when the
  /// branch exists already.
  expected<std::string> commit_to_branch(const std::string& dir,
                                         const std::string& branch,
                                         const std::string& message) const;

  /// Applies `patch_path` to the repository's working tree, or fails
  /// without changing anything (a conflict).
  expected<bool> apply(const std::string& patch_path) const;

  /// Deletes the branch the task delivered to (`branch()`), whatever it
  /// holds: a best-of-N step's losers. True when there was one, false when
  /// there was none.
  expected<bool> remove_branch() const;

  /// The branch a task delivers to (`delivery_branch`).
  std::string branch() const { return delivery_branch(task_id_); }

  const repo_spec& repo() const noexcept { return repo_; }

private:
  /// Runs git with `args` in `cwd` (the repository when empty).
  command_result git(std::vector<std::string> args, std::string cwd = {},
                     std::string stdout_path = {}) const;

  repo_spec repo_;
  std::string task_id_;
};

/// The built-in admission checks of a task at submission, before it is
/// queued: a repository task's repository is a git repository and its base
/// resolves; every agent's CLI resolves (process runtime: an executable in
/// PATH or at its path); the task's mounts exist on this host. The error
/// names the check and the task field. With `allowed_paths` (node.json),
/// the repository and every mount must lie in one of them.
expected<bool> admit_task(const task_spec& task, const std::string& runtime,
                          const std::vector<std::string>& allowed_paths = {});

/// The prompt of an attempt after a failure: `prompt`, then `tmpl` (or the
/// default template) with `{attempt}`, `{reason}` and `{output}` replaced.
std::string feedback_prompt(const std::string& prompt, const std::string& tmpl,
                            int failed_attempt, const std::string& reason,
                            const std::string& output);

} // namespace tasksup::runtime

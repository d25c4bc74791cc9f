#pragma once

#include "state_dir.hpp"

#include "tasksup/runtime/process_runtime.hpp"
#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

/// Adds `--runtime NAME` (one of `runtime_names`); `help` says what it
/// applies to and what applies without it.
inline CLI::Option* add_runtime_option(CLI::App& cmd, std::string& name,
                                       const std::string& help) {
  return cmd.add_option("--runtime", name, help)
    ->check(CLI::IsMember(
      std::vector<std::string>(runtime_names.begin(), runtime_names.end())));
}

/// Adds `--work-dir DIR`, where attempts keep their files; without it a
/// fresh `$TMPDIR/tasksup/<prefix>-...`.
inline CLI::Option* add_work_dir_option(CLI::App& cmd, std::string& dir,
                                        const std::string& prefix) {
  return cmd.add_option("--work-dir", dir,
                        "Directory for the attempts' workspaces, artifacts "
                        "and output logs (default: a fresh "
                        "$TMPDIR/tasksup/" +
                          prefix + "-...)");
}

/// A loaded configuration and where it came from.
struct loaded_config {
  config_set config;
  /// The directory used; empty when none applied (built-in defaults).
  std::string dir;
};

/// Loads the config directory chosen by `resolve_config_dir(flag)`, or the
/// built-in defaults when none applies. Errors name the file.
expected<loaded_config> load_node_config(const std::string& flag);

/// Creates the runtime named `name` ("process" or "docker") with the output
/// limits of `node`; warnings of the runtime go to the log. Errors say what is
/// wrong (an unknown name, an unusable DOCKER_HOST).
/// Who starts a runtime's attempts, and what becomes of them when that
/// program dies without stopping them.
struct runtime_owner {
  /// The label tasksup.owner on its containers: "run" or "serve".
  std::string name;
  runtime::orphan_policy orphans = runtime::orphan_policy::kill;
};

expected<std::shared_ptr<runtime::container_runtime>>
make_named_runtime(std::string_view name, const node_config& node,
                   const runtime_owner& owner);

/// A fresh directory name for the attempts of one `run` or `serve`:
/// `$TMPDIR/tasksup/<kind>-<local time>-<pid>` (not created here; its parent
/// is, marked on ext4 so that each run's directory goes to a fresh block
/// group).
std::string fresh_work_dir(std::string_view kind);

/// A seed for trace ids and jitter that differs between runs.
std::uint64_t fresh_seed();

/// Makes a node's state directory `dir` private (`make_state_dir_private`),
/// logs which directory it is (and that it was created, when it was), and
/// warns when it was open to other users and has been made 0700; an error
/// when it could not be.
expected<bool> secure_state_dir(const std::string& dir);

/// Sends spdlog's default logger to stderr as `tasksup: <level>: <text>`
/// (with a timestamp when `timestamps`).
void setup_logging(bool timestamps);

} // namespace tasksup::app

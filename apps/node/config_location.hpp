#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace tasksup::app {

/// How commands find the config directory, for `--help` texts.
inline constexpr const char* config_dir_rule =
  "The config directory is --config DIR if given, else $TASKSUP_CONFIG_DIR "
  "if set, else ./config if the current directory has one, else the "
  "config/ directory of the source tree tasksup was built from if it still "
  "exists, else none (built-in defaults).";

/// Adds the `--config DIR` option every config-reading command takes.
inline CLI::Option* add_config_option(CLI::App& cmd, std::string& dir) {
  return cmd
    .add_option("--config", dir,
                "Config directory (supervisor.json, classifier.json, "
                "node.json, environments/)")
    ->type_name("DIR");
}

/// Applies `config_dir_rule`: `flag` is the --config value (empty when not
/// given). Returns nullopt when no directory applies.
std::optional<std::string> resolve_config_dir(const std::string& flag);

} // namespace tasksup::app

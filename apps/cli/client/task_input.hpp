#pragma once

#include "tasksup/supervisor/expected.hpp"

#include <boost/json/value.hpp>

#include <string>

namespace tasksup::app {

/// A task file read for `run` or `submit`, before validation.
struct task_input {
  /// The file as given on the command line (errors name it).
  std::string path;
  /// The parsed document, with relative agent paths made absolute.
  boost::json::value doc;
  /// `doc` serialized, for `submit_json` to a node.
  std::string text;
};

/// Reads a task file. An `agent_cli` containing a `/` that is not absolute
/// (`./agents/flaky-agent`) is taken relative to the task file's directory
/// and made absolute, so a task means the same whatever the working
/// directory of tasksup or of the node it is sent to. A command name without
/// `/` is left to PATH. Errors name the file, and the line and column of a
/// syntax error.
expected<task_input> read_task_input(const std::string& path);

/// Applies the agent path rule of `read_task_input` to `doc` in place, for a
/// task file in directory `base_dir` (a group document's: to each of its
/// tasks). Values of unexpected types are left
/// alone for validation to report.
void resolve_agent_paths(boost::json::value& doc, const std::string& base_dir);

} // namespace tasksup::app

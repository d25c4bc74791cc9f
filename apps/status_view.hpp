#pragma once

// What `tasksup status` prints, from the JSON records a node's tasks are
// described by. The same code prints what came over the actor connection
// (status_command.cpp) and over the node's local control socket (the thin
// front program), so the two paths cannot drift apart.

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

/// One task as `status` shows it: the record `status --json` prints (the
/// task's fields, its times and final result) and the node's last decision
/// for it, shown under a single task's table.
struct status_row {
  boost::json::object record;
  std::string last_decision;
};

/// Everything `status` prints, with the node's clock (seconds since the
/// epoch) that ages and waits are measured against.
struct status_answer {
  double now = 0;
  std::vector<status_row> rows;
};

/// Parses `--state` values (repeated, or comma-separated) into `out`.
/// Returns the error text for a value that is not a state.
std::optional<std::string>
parse_state_filter(const std::vector<std::string>& values,
                   std::set<std::string>& out);

/// Prints one task (`single`) or the node's tasks in `states` (all when
/// empty) as a table, or as JSON with `json`.
void print_status(const status_answer& answer, bool single, bool json,
                  const std::set<std::string>& states);

/// `answer` as the local control socket sends it:
/// {"now":N,"tasks":[{"record":{...},"last_decision":"..."}]}.
std::string status_answer_json(const status_answer& answer);

/// Reads what `status_answer_json` wrote; nullopt when `text` is not that.
std::optional<status_answer> parse_status_answer(const std::string& text);

} // namespace tasksup::app

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
  /// The node's schedules (`schedule_record`'s objects), shown under the
  /// table of all tasks.
  std::vector<boost::json::object> schedules;
};

/// Which tasks `status` lists: those in one of `states` and with one of
/// `outcomes` (an empty set does not filter; a task not done has no
/// outcome).
struct status_filter {
  std::set<std::string> states;
  std::set<std::string> outcomes;

  /// Whether `record` passes.
  bool admits(const boost::json::object& record) const;

  bool empty() const { return states.empty() && outcomes.empty(); }
};

/// Parses `--state` values (repeated, or comma-separated) into `out`.
/// Returns the error text for a value that is not a state.
std::optional<std::string>
parse_state_filter(const std::vector<std::string>& values,
                   std::set<std::string>& out);

/// Parses `--outcome` values (repeated, or comma-separated; the names of
/// `task_outcome`) into `out`. Returns the error text, listing the valid
/// names, for a value that is not one.
std::optional<std::string>
parse_outcome_filter(const std::vector<std::string>& values,
                     std::set<std::string>& out);

/// Prints one task (`single`) or the node's tasks `filter` admits as a
/// table, or as JSON with `json`.
void print_status(const status_answer& answer, bool single, bool json,
                  const status_filter& filter);

/// The schedules as a table (NAME, TIMING, OVERLAP, NEXT, LAST, RUNNING,
/// RUNS, SKIPPED), from `schedule_record`'s objects; times against `now`.
void print_schedules(const std::vector<boost::json::object>& schedules,
                     double now);

/// `answer` as the local control socket sends it:
/// {"now":N,"tasks":[{"record":{...},"last_decision":"..."}],
/// "schedules":[...]}.
std::string status_answer_json(const status_answer& answer);

/// Reads what `status_answer_json` wrote; nullopt when `text` is not that.
std::optional<status_answer> parse_status_answer(const std::string& text);

} // namespace tasksup::app

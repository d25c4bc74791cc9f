#pragma once

// What `tasksup status` prints, from the JSON records a node's tasks are
// described by. The same code prints what came over the actor connection
// (status_command.cpp) and over the node's local control socket (the thin
// front program), so the two paths cannot drift apart.

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

/// One task as `status` shows it: the record `status --json` prints (the
/// task's fields, its times and final result) and the node's last decision
/// for it, shown under a single task's table.
struct status_row {
  boost::json::object record;
  std::string last_decision;
};

/// Where a page of `status` stands: the tasks the node has, how many of
/// them the filter admits, and how many of those follow the page.
struct status_paging {
  std::uint64_t total = 0;
  std::uint64_t matched = 0;
  std::uint64_t more = 0;
};

/// Everything `status` prints, with the node's clock (seconds since the
/// epoch) that ages and waits are measured against.
struct status_answer {
  double now = 0;
  std::vector<status_row> rows;
  /// Set for a page (the rows already filtered by the node).
  std::optional<status_paging> paging;
  /// The node's schedules (`schedule_record`'s objects), shown under the
  /// table of all tasks.
  std::vector<boost::json::object> schedules;
};

/// Which tasks `status` lists: those in one of `states`, with one of
/// `outcomes` and of agent `agent` (an empty set or "" does not filter; a
/// task not done has no outcome; a task's agent is that of its current or
/// last attempt).
struct status_filter {
  std::set<std::string> states;
  std::set<std::string> outcomes;
  std::string agent;

  /// Whether `record` passes.
  bool admits(const boost::json::object& record) const;

  bool empty() const {
    return states.empty() && outcomes.empty() && agent.empty();
  }
};

/// The error text for an `--agent` value too long to be an agent id (64
/// bytes), or nullopt.
std::optional<std::string> check_agent_filter(const std::string& agent);

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

/// The page `status` asks for: at most `limit` tasks (0: all) after the
/// task `after`, of those its filter admits.
struct status_page_options {
  std::uint32_t limit = 0;
  std::string after;
};

/// Largest `--limit`.
inline constexpr std::uint32_t max_status_limit = 1000000;

/// How many tasks `status` without `--limit` asks for at a time: no one
/// request waits on all of a big node's tasks, and `--json` prints each
/// chunk as it comes.
inline constexpr std::uint32_t status_chunk = 2000;

/// The error text for page options out of bounds (a task id is at most 64
/// bytes), or nullopt.
std::optional<std::string> check_page_options(const status_page_options& p);

/// The query string of `/v1/status` (the local control socket) for `p` and
/// `filter`: limit, after, agent, state and outcome, each only when set.
std::string status_query_string(const status_page_options& p,
                                const status_filter& filter);

/// The command line that shows the next page ("tasksup status --limit 100
/// --state running"), without its `--after`.
std::string next_page_command(const status_page_options& p,
                              const status_filter& filter);

/// Prints one task (`single`) or the node's tasks `filter` admits as a
/// table, or with `json` as JSON (a list: one record per line). Under a
/// page's table, how many more tasks there are and the `--after` that
/// shows them (on stderr with `json`); `command` is the command line that
/// asked, without `--after`.
void print_status(const status_answer& answer, bool single, bool json,
                  const status_filter& filter,
                  const std::string& command = "tasksup status");

/// The schedules as a table (NAME, TIMING, OVERLAP, NEXT, LAST, RUNNING,
/// RUNS, SKIPPED), from `schedule_record`'s objects; times against `now`.
void print_schedules(const std::vector<boost::json::object>& schedules,
                     double now);

/// `answer` as the local control socket sends it:
/// {"now":N,"tasks":[{"record":{...},"last_decision":"..."}],
/// "schedules":[...]}, and for a page "total", "matched" and "more".
std::string status_answer_json(const status_answer& answer);

/// Reads what `status_answer_json` wrote; nullopt when `text` is not that.
std::optional<status_answer> parse_status_answer(const std::string& text);

} // namespace tasksup::app

// `tasksup status [TASK]`: what a node's tasks are doing.

#include "commands.hpp"
#include "node_client.hpp"
#include "status_record.hpp"
#include "status_view.hpp"

#include "tasksup/actors/protocol.hpp"

#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct status_options {
  std::string task_id;
  std::string node;
  bool json = false;
  /// Only tasks in these states (empty: all).
  std::vector<std::string> states;
};

/// The statistics' `(view)` text with every task's times; empty when the
/// node does not answer it (an older node).
std::string fetch_times(node_session& s) {
  std::string out;
  s.self->request(s.node, node_request_timeout, view_atom::value)
    .receive([&](std::string& text) { out = std::move(text); },
             [](caf::error&) {});
  return out;
}

int status(const status_options& opts) {
  std::set<std::string> states;
  if (auto err = parse_state_filter(opts.states, states)) {
    std::cerr << "tasksup status: " << *err << '\n';
    return exit_status::bad_input;
  }
  return with_node("status", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    auto on_error = [&](caf::error& err) {
      rc = report_request_error(s, err, exit_status::unavailable);
    };
    std::optional<std::vector<task_status>> all;
    if (!opts.task_id.empty())
      s.self
        ->request(s.node, node_request_timeout, status_atom::value,
                  opts.task_id)
        .receive(
          [&](task_status& st) {
            all.emplace();
            all->push_back(std::move(st));
          },
          on_error);
    else
      s.self->request(s.node, node_request_timeout, status_atom::value)
        .receive([&](std::vector<task_status>& x) { all = std::move(x); },
                 on_error);
    if (!all)
      return rc;
    print_status(make_status_answer(*all, fetch_times(s)),
                 !opts.task_id.empty(), opts.json, states);
    return rc;
  });
}

void setup_status(CLI::App& app, int& status_code) {
  auto opts = std::make_shared<status_options>();
  auto* cmd = app.add_subcommand(
    "status", "Show what a node's tasks are doing: state, agent, attempt, "
              "retries, age, next retry and outcome.");
  cmd->add_option("task", opts->task_id, "Only this task (by id)");
  cmd->add_flag("--json", opts->json,
                "Print JSON instead of a table: an array of task records "
                "(one object with TASK), with the final result of finished "
                "tasks as `task_done` carries it and the times "
                "submitted_ts, next_retry_ts, finished_ts (seconds since the "
                "epoch, null when unknown)");
  cmd->add_option("--state", opts->states,
                  "Only tasks in this state: queued, running, backoff, "
                  "paused, quota_wait or done (repeat or separate with "
                  "commas)");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

States: queued (waiting for an attempt slot), running, backoff (waiting to
retry), paused (by `tasksup pause`, until `tasksup resume`), quota_wait
(its agent's usage quota is used up: waiting for the reset), done. AGE is
the time since the task was submitted; NEXT RETRY the wait left before a
task in backoff tries again, or before a quota resets. With TASK, the times follow
the table in ISO 8601 (UTC). On the node's machine, without --certs,
--insecure or $TASKSUP_CERTS, the command asks over the node's control
socket (<state dir>/control-PORT.sock; see `tasksup serve --help`) when it
is there. The node remembers finished tasks up to its
history limit. An unknown task id exits with status 3.

Example:
  tasksup status
  tasksup status --state running,backoff
  tasksup status demo-flaky --json)");
  cmd->callback([opts, &status_code] { status_code = status(*opts); });
}

command_registrar registrar{60, setup_status};

} // namespace

} // namespace tasksup::app

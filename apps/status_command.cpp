// `tasksup status [TASK]`: what a node's tasks are doing.

#include "commands.hpp"
#include "node_client.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/protocol.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct status_options {
  std::string task_id;
  std::string node;
  bool json = false;
};

/// One status record as JSON (the result as `task_done` carries it).
boost::json::object to_json(const task_status& s) {
  boost::json::object out;
  out["task_id"] = s.task_id;
  out["environment"] = s.environment;
  out["state"] = std::string{to_string(s.state)};
  out["agent_id"] = s.agent_id;
  out["attempt"] = s.attempt;
  out["retry_count"] = s.retry_count;
  out["max_retries"] = s.max_retries;
  out["total_attempts"] = s.total_attempts;
  out["fallback_count"] = s.fallback_count;
  out["trace_id"] = s.trace_id;
  if (s.result) {
    boost::system::error_code ec;
    auto result = boost::json::parse(result_to_json(*s.result), ec);
    out["result"] = ec ? boost::json::value{} : std::move(result);
  } else {
    out["result"] = nullptr;
  }
  return out;
}

/// Text for a terminal: no control characters from remote data.
std::string cell(const std::string& text) {
  std::string out;
  for (unsigned char c : text)
    out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
  return out.empty() ? "-" : out;
}

std::string outcome_of(const task_status& s) {
  if (!s.result)
    return "-";
  auto text = std::string{to_string(s.result->outcome)};
  if (s.result->outcome != task_outcome::succeeded && s.result->exit_code >= 0)
    text += " (exit " + std::to_string(s.result->exit_code) + ")";
  return text;
}

/// The table a person reads: one row per task.
void print_table(const std::vector<task_status>& all) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"TASK", "STATE", "AGENT", "ATTEMPT", "RETRIES", "OUTCOME"});
  for (auto& s : all) {
    auto retries = std::to_string(s.retry_count);
    if (s.max_retries > 0 && s.state != task_state::done)
      retries += "/" + std::to_string(s.max_retries);
    rows.push_back({cell(s.task_id), std::string{to_string(s.state)},
                    cell(s.agent_id), std::to_string(s.attempt), retries,
                    cell(outcome_of(s))});
  }
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  for (auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << '\n';
  }
}

int status(const status_options& opts) {
  return with_node("status", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    auto on_error = [&](caf::error& err) {
      rc = report_request_error(s, err, exit_status::unavailable);
    };
    if (!opts.task_id.empty()) {
      s.self
        ->request(s.node, node_request_timeout, status_atom::value,
                  opts.task_id)
        .receive(
          [&](task_status& st) {
            if (opts.json)
              std::cout << boost::json::serialize(to_json(st)) << '\n';
            else
              print_table({st});
          },
          on_error);
      return rc;
    }
    s.self->request(s.node, node_request_timeout, status_atom::value)
      .receive(
        [&](std::vector<task_status>& all) {
          if (opts.json) {
            boost::json::array out;
            for (auto& st : all)
              out.push_back(to_json(st));
            std::cout << boost::json::serialize(out) << '\n';
          } else if (all.empty()) {
            std::cout << "no tasks\n";
          } else {
            print_table(all);
          }
        },
        on_error);
    return rc;
  });
}

void setup_status(CLI::App& app, int& status_code) {
  auto opts = std::make_shared<status_options>();
  auto* cmd = app.add_subcommand(
    "status", "Show what a node's tasks are doing: state, agent, attempt, "
              "retries and outcome.");
  cmd->add_option("task", opts->task_id, "Only this task (by id)");
  cmd->add_flag("--json", opts->json,
                "Print JSON instead of a table: an array of task records "
                "(one object with TASK), with the final result of finished "
                "tasks as `task_done` carries it");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

States: queued (waiting for an attempt slot), running, backoff (waiting to
retry), done. The node remembers finished tasks up to its history limit.
An unknown task id exits with status 3.

Example:
  tasksup status
  tasksup status demo-flaky --json)");
  cmd->callback([opts, &status_code] { status_code = status(*opts); });
}

command_registrar registrar{60, setup_status};

} // namespace

} // namespace tasksup::app

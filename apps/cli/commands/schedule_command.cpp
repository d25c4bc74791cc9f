// `tasksup schedule list | add FILE | pause NAME | resume NAME | delete NAME`:
// a node's schedules (schedule_actor.hpp). Each subcommand is one request
// to the node, answered with the schedules it concerns.

#include "commands.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"
#include "status_record.hpp"
#include "status_view.hpp"
#include "task_input.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/config.hpp"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

namespace fs = std::filesystem;

struct schedule_options {
  std::string node;
  std::string file;
  std::string name;
  bool json = false;
};

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// Sends `req` and prints what the node answers: the schedules as a table
/// (or JSON), or `done` for the one changed.
int send(const char* command, const schedule_options& opts,
         schedule_request req, const std::string& done) {
  return with_node(command, opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    s.self
      ->request(s.node, node_request_timeout, schedule_atom::value,
                std::move(req))
      .receive(
        [&](std::vector<schedule_info>& list) {
          std::vector<boost::json::object> records;
          for (auto& x : list)
            records.push_back(schedule_record(x));
          if (opts.json) {
            boost::json::array out;
            for (auto& r : records)
              out.emplace_back(std::move(r));
            std::cout << boost::json::serialize(out) << '\n';
            return;
          }
          if (!done.empty())
            std::cout << done << '\n';
          if (records.empty()) {
            if (done.empty())
              std::cout << "no schedules\n";
            return;
          }
          print_schedules(records, wall_now());
        },
        [&](caf::error& err) {
          rc = report_request_error(s, err, exit_status::bad_input);
        });
    return rc;
  });
}

int add(const schedule_options& opts) {
  auto doc = read_json_file(opts.file);
  if (!doc) {
    std::cerr << "tasksup schedule add: " << doc.error().to_string() << '\n';
    return exit_status::bad_input;
  }
  auto name =
    opts.name.empty() ? fs::path{opts.file}.stem().string() : opts.name;
  // The task's agents relative to the file, as `submit` takes them.
  if (auto* o = doc->if_object())
    if (auto* task = o->if_contains("task")) {
      std::error_code ec;
      resolve_agent_paths(
        *task, fs::absolute(fs::path{opts.file}, ec).parent_path().string());
    }
  schedule_request req{schedule_op::add, name, boost::json::serialize(*doc)};
  return send("schedule add", opts, std::move(req),
              "added schedule '" + cell(name) + "'");
}

void setup_schedule(CLI::App& app, int& status) {
  auto* cmd = app.add_subcommand(
    "schedule", "List, add, pause, resume or delete a node's schedules: "
                "tasks started on a cron expression or a fixed interval.");
  cmd->require_subcommand(1);
  cmd->footer(R"(A schedule is a JSON file:
  {"every": "30s" | "cron": "0 3 * * *", "time_zone": "Europe/Berlin",
   "overlap": "skip", "catchup": 1, "task": {...a task without "id"...}}
Schedules come from the node's config directory (schedules/NAME.json, read
when the node starts) or from `tasksup schedule add FILE`, which the node
journals. A run's task id is the schedule's name and its due time in UTC
(nightly-20261130T030000Z). Overlap, when a run is still going at the next
fire: skip (default), buffer_one (one fire waits for the run's end),
allow_all, cancel_other (the run is stopped, then the new one starts).
After the node was down, at most `catchup` missed runs (default 1) start
at once. `tasksup status` lists the schedules under the tasks.)");

  auto list_opts = std::make_shared<schedule_options>();
  auto* list = cmd->add_subcommand("list", "Show every schedule: timing, "
                                           "next and last run, the run "
                                           "still going, runs and skips.");
  list->add_flag("--json", list_opts->json,
                 "Print a JSON array: name, source, timing, overlap, paused, "
                 "next_ts, last_ts (seconds since the epoch, or null), "
                 "running (a task id or null), runs, skipped");
  add_node_option(list, list_opts->node);
  list->footer(node_help());
  list->callback([list_opts, &status] {
    status = send("schedule list", *list_opts, {schedule_op::list, {}, {}}, {});
  });

  auto add_opts = std::make_shared<schedule_options>();
  auto* add_cmd = cmd->add_subcommand(
    "add", "Add a schedule from a file; it fires from now on.");
  add_cmd->add_option("file", add_opts->file, "The schedule's JSON file")
    ->required();
  add_cmd->add_option("--name", add_opts->name,
                      "Its name (default: the file's name without .json): "
                      "1 to 47 of A-Z a-z 0-9 _ . -");
  add_cmd->add_flag("--json", add_opts->json, "Print it as `list --json`");
  add_node_option(add_cmd, add_opts->node);
  add_cmd->footer(node_help() + R"(

The file is checked as `tasksup validate` checks one (its task too); the
task's relative agent paths are relative to the file. A name in use is
refused: delete the schedule first to replace it.

Example:
  tasksup schedule add nightly-flaky.json)");
  add_cmd->callback([add_opts, &status] { status = add(*add_opts); });

  struct named {
    const char* name;
    const char* summary;
    schedule_op op;
    const char* done;
  };
  for (auto x : {named{"pause", "Stop firing a schedule until it is resumed.",
                       schedule_op::pause, "paused schedule"},
                 named{"resume",
                       "Fire a paused schedule again from now on (what it "
                       "missed while paused is not caught up).",
                       schedule_op::resume, "resumed schedule"},
                 named{"delete",
                       "Delete a schedule added by `schedule add` (a run "
                       "still going goes on); a config file's stays until "
                       "its file is removed.",
                       schedule_op::remove, "deleted schedule"}}) {
    auto opts = std::make_shared<schedule_options>();
    auto* sub = cmd->add_subcommand(x.name, x.summary);
    sub->add_option("name", opts->name, "The schedule")->required();
    sub->add_flag("--json", opts->json, "Print it as `list --json`");
    add_node_option(sub, opts->node);
    sub->footer(node_help());
    sub->callback([opts, x, &status] {
      status = send(("schedule " + std::string{x.name}).c_str(), *opts,
                    {x.op, opts->name, {}},
                    std::string{x.done} + " '" + cell(opts->name) + "'");
    });
  }
}

command_registrar registrar{63, setup_schedule};

} // namespace

} // namespace tasksup::app

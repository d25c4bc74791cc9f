// `tasksup submit TASK.json`: hands a task to a running node.

#include "commands.hpp"
#include "node_client.hpp"
#include "task_input.hpp"

#include "tasksup/actors/protocol.hpp"

#include <iostream>
#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct submit_options {
  std::string task_file;
  std::string node;
};

int submit(const submit_options& opts) {
  // Read here (relative agent paths resolved against the file), validate
  // there: the node checks the task against its own configuration.
  auto input = read_task_input(opts.task_file);
  if (!input) {
    std::cerr << "tasksup submit: " << input.error().to_string() << '\n';
    return exit_status::bad_input;
  }
  return with_node("submit", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    s.self
      ->request(s.node, node_request_timeout, submit_json_atom::value,
                input->text)
      .receive([&](std::string& id) { std::cout << id << '\n'; },
               [&](caf::error& err) {
                 if (err.category() != protocol_error_category) {
                   rc = report_request_error(s, err, exit_status::bad_input);
                   return;
                 }
                 std::cerr << "tasksup submit: " << opts.task_file
                           << ": rejected by the node: " << error_text(err)
                           << '\n';
                 rc = exit_status::bad_input;
               });
    return rc;
  });
}

void setup_submit(CLI::App& app, int& status) {
  auto opts = std::make_shared<submit_options>();
  auto* cmd = app.add_subcommand(
    "submit", "Send a task to a running node (`tasksup serve`) and print its "
              "id at once; the node runs it in the background.");
  cmd->add_option("task", opts->task_file, "The task file (JSON, SPEC §12)")
    ->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

The node validates the task against its own config; a rejected task changes
nothing on the node and exits with status 2 and the node's reason. An
agent_cli path such as ./agents/my-agent is taken relative to the task
file's directory (made absolute before sending). Follow the task with
`tasksup events --follow ID` or `tasksup status ID`.

Example:
  id=$(tasksup submit config/examples/demo-flaky.json)
  tasksup events --follow "$id")");
  cmd->callback([opts, &status] { status = submit(*opts); });
}

command_registrar registrar{50, setup_submit};

} // namespace

} // namespace tasksup::app

// `tasksup stop TASK`: cancels a task on a node, gracefully.

#include "commands.hpp"
#include "node_client.hpp"

#include "tasksup/actors/protocol.hpp"

#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct stop_options {
  std::string task_id;
  std::string node;
};

void setup_stop(CLI::App& app, int& status) {
  auto opts = std::make_shared<stop_options>();
  auto* cmd = app.add_subcommand(
    "stop", "Stop a task gracefully: the agent gets SIGTERM (docker stop), "
            "then a kill after the grace period; a pending retry is skipped.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Exit status 0 when the stop was delivered, 1 when the task had already
finished. Use `tasksup kill` to end it at once.

Example:
  tasksup stop demo-slow)");
  cmd->callback([opts, &status] {
    status = with_node("stop", opts->node, false, [&](node_session& s) {
      return control_request(s, "stopping " + opts->task_id,
                             "task " + opts->task_id + " has already finished",
                             stop_atom::value, opts->task_id,
                             stop_mode::cancel);
    });
  });
}

command_registrar registrar{70, setup_stop};

} // namespace

} // namespace tasksup::app

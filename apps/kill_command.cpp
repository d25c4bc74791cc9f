// `tasksup kill TASK`: kills a task's running attempt on a node at once.

#include "commands.hpp"
#include "node_client.hpp"

#include "tasksup/actors/protocol.hpp"

#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct kill_options {
  std::string task_id;
  std::string node;
};

void setup_kill(CLI::App& app, int& status) {
  auto opts = std::make_shared<kill_options>();
  auto* cmd = app.add_subcommand(
    "kill", "Kill a task at once: its running attempt and everything it "
            "started are killed; no retry, no fallback.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Exit status 0 when the kill was delivered, 1 when the task had already
finished.

Example:
  tasksup kill demo-slow)");
  cmd->callback([opts, &status] {
    status = with_node("kill", opts->node, false, [&](node_session& s) {
      return control_request(s, "killing " + opts->task_id,
                             "task " + opts->task_id + " has already finished",
                             stop_atom::value, opts->task_id, stop_mode::kill);
    });
  });
}

command_registrar registrar{71, setup_kill};

} // namespace

} // namespace tasksup::app

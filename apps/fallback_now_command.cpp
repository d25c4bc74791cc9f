// `tasksup fallback-now TASK`: abandons a task's current agent.

#include "commands.hpp"
#include "node_client.hpp"

#include "tasksup/actors/protocol.hpp"

#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct fallback_now_options {
  std::string task_id;
  std::string node;
};

void setup_fallback_now(CLI::App& app, int& status) {
  auto opts = std::make_shared<fallback_now_options>();
  auto* cmd = app.add_subcommand(
    "fallback-now", "Abandon a task's current agent (stopping its attempt) and "
                    "move to the next agent in its chain.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Exit status 0 when the task moved on, 1 when it could not (finished, or no
next agent).

Example:
  tasksup fallback-now fix-login)");
  cmd->callback([opts, &status] {
    status = with_node("fallback-now", opts->node, false, [&](node_session& s) {
      return control_request(
        s, "falling back to the next agent of " + opts->task_id,
        "task " + opts->task_id +
          " cannot fall back (finished, or no next agent)",
        force_fallback_atom::value, opts->task_id);
    });
  });
}

command_registrar registrar{73, setup_fallback_now};

} // namespace

} // namespace tasksup::app

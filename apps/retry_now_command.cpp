// `tasksup retry-now TASK`: ends a task's backoff wait early.

#include "commands.hpp"
#include "node_client.hpp"

#include "tasksup/actors/protocol.hpp"

#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct retry_now_options {
  std::string task_id;
  std::string node;
};

void setup_retry_now(CLI::App& app, int& status) {
  auto opts = std::make_shared<retry_now_options>();
  auto* cmd = app.add_subcommand(
    "retry-now",
    "Skip the rest of a task's backoff wait and start its next attempt now.");
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

Exit status 0 when the retry started, 1 when the task was not waiting to
retry.

Example:
  tasksup retry-now demo-flaky)");
  cmd->callback([opts, &status] {
    status = with_node("retry-now", opts->node, false, [&](node_session& s) {
      return control_request(s, "retrying " + opts->task_id + " now",
                             "task " + opts->task_id +
                               " is not waiting to retry",
                             retry_now_atom::value, opts->task_id);
    });
  });
}

command_registrar registrar{72, setup_retry_now};

} // namespace

} // namespace tasksup::app

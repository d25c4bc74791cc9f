// `tasksup stop | kill | retry-now | fallback-now | forget | pause | resume
// TASK`: the control
// commands, one row each. Every one sends one request to the node and is
// answered with whether it took effect.

#include "commands.hpp"
#include "control_actions.hpp"
#include "node_client.hpp"

#include "tasksup/actors/protocol.hpp"

#include <functional>
#include <memory>
#include <string>

namespace tasksup::app {

namespace {

/// One control command.
struct control_command {
  const char* name;
  /// The one-line description in `--help`.
  const char* summary;
  /// What exit status 1 means, and an example (the footer after the node
  /// rules).
  const char* footer;
  /// Sends the request.
  int (*send)(node_session& s, const std::string& done, const std::string& noop,
              const std::string& task_id);
  int order;
};

const control_command commands[] = {
  {"stop",
   "Stop a task gracefully: the agent gets SIGTERM (docker stop), then a kill "
   "after the grace period; a pending retry is skipped.",
   R"(Exit status 0 when the stop was delivered, 1 when the task had already
finished. Use `tasksup kill` to end it at once.

Example:
  tasksup stop demo-slow)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, stop_atom::value, id,
                            stop_mode::cancel);
   },
   70},
  {"kill",
   "Kill a task at once: its running attempt and everything it started are "
   "killed; no retry, no fallback.",
   R"(Exit status 0 when the kill was delivered, 1 when the task had already
finished.

Example:
  tasksup kill demo-slow)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, stop_atom::value, id,
                            stop_mode::kill);
   },
   71},
  {"retry-now",
   "Skip the rest of a task's backoff wait and start its next attempt now.",
   R"(Exit status 0 when the retry started, 1 when the task was not waiting to
retry.

Example:
  tasksup retry-now demo-flaky)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, retry_now_atom::value, id);
   },
   72},
  {"fallback-now",
   "Abandon a task's current agent (stopping its attempt) and move to the "
   "next agent in its chain.",
   R"(Exit status 0 when the task moved on, 1 when it could not (finished, or
no next agent: then nothing changes).

Example:
  tasksup fallback-now fix-login)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, force_fallback_atom::value, id);
   },
   73},
  {"forget",
   "Forget a finished task: its status, history, journal record and attempt "
   "directories (logs, artifacts) are removed, and its id is free again.",
   R"(Exit status 0 when the task was forgotten, 1 when it has not finished
(stop or kill it first), 3 when the node has no such task.

Example:
  tasksup forget demo-flaky)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, forget_atom::value, id);
   },
   74},
  {"pause",
   "Pause a task: no further attempt starts until `tasksup resume`. A running "
   "attempt (with its gates and delivery) is left to finish; a queued task "
   "leaves the queue and a backoff keeps the time it had left.",
   R"(Exit status 0 when the task was paused, 1 when it was already paused or
has finished. `status` shows a paused task as `paused`; a pause is journaled
and outlives a restart of the node. Stop, kill and fallback-now still work
on a paused task.

Example:
  tasksup pause fix-login)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, pause_atom::value, id);
   },
   75},
  {"resume",
   "Resume a paused task: its next attempt starts (after what was left of "
   "its backoff, or the reset of a used-up quota).",
   R"(Exit status 0 when the task was resumed, 1 when it was not paused.

Example:
  tasksup resume fix-login)",
   [](node_session& s, const std::string& done, const std::string& noop,
      const std::string& id) {
     return control_request(s, done, noop, resume_atom::value, id);
   },
   76},
};

/// The command line options of one control command.
struct control_options {
  std::string task_id;
  std::string node;
};

void setup(const control_command& c, CLI::App& app, int& status) {
  auto opts = std::make_shared<control_options>();
  auto* cmd = app.add_subcommand(c.name, c.summary);
  cmd->add_option("task", opts->task_id, "The task's id")->required();
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + "\n\n" + c.footer);
  cmd->callback([&c, opts, &status] {
    // What it prints, the same over the control socket (front/main.cpp).
    auto& texts = *find_control_action(c.name);
    status = with_node(c.name, opts->node, false, [&](node_session& s) {
      return c.send(s, texts.done_text(opts->task_id),
                    texts.noop_text(opts->task_id), opts->task_id);
    });
  });
}

/// Registers every row (before main runs, like the other commands).
const bool registered = [] {
  for (auto& c : commands)
    command_registrar{
      c.order, [&c](CLI::App& app, int& status) { setup(c, app, status); }};
  return true;
}();

} // namespace

} // namespace tasksup::app

// `tasksup submit TASK.json...` / `tasksup submit -`: hands tasks to a
// running node over one connection and prints their ids.

#include "commands.hpp"
#include "node_client.hpp"
#include "task_source.hpp"

#include "tasksup/actors/protocol.hpp"

#include <cstddef>
#include <deque>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

/// Requests in flight on the connection at once: enough to hide the round
/// trip, few enough that none waits long for the node.
constexpr std::size_t submit_window = 64;

struct submit_options {
  std::vector<std::string> task_files;
  std::string node;
  bool replace = false;
};

int submit(const submit_options& opts) {
  task_source source{opts.task_files};
  // Read here (relative agent paths resolved against the file), validate
  // there: the node checks each task against its own configuration. The
  // first task is read before connecting, so a single bad file fails fast.
  auto first = source.next();
  if (!first)
    return source.failed > 0 ? exit_status::bad_input : exit_status::ok;
  return with_node("submit", opts.node, false, [&](node_session& s) {
    using handle_t =
      decltype(s.self->request(s.node, node_request_timeout,
                               submit_json_atom::value, std::string{}, false));
    struct in_flight {
      handle_t handle;
      std::string where;
    };
    std::deque<in_flight> window;
    std::optional<task_text> next = std::move(first);
    std::size_t rejected = 0;
    bool node_failed = false;
    for (;;) {
      // Keep the window full; ids come back and are printed in input order.
      while (next && !node_failed && window.size() < submit_window) {
        auto handle =
          s.self->request(s.node, node_request_timeout, submit_json_atom::value,
                          std::move(next->text), opts.replace);
        window.push_back(in_flight{std::move(handle), std::move(next->where)});
        next = source.next();
      }
      if (window.empty())
        break;
      auto item = std::move(window.front());
      window.pop_front();
      item.handle.receive(
        [&](std::string& id) { std::cout << id << '\n'; },
        [&](caf::error& err) {
          if (err.category() != protocol_error_category) {
            report_request_error(s, err, exit_status::bad_input);
            std::cerr << "tasksup submit: " << item.where
                      << ": not known to be submitted\n";
            node_failed = true;
            return;
          }
          std::cerr << "tasksup submit: " << item.where
                    << ": rejected by the node: " << error_text(err) << '\n';
          ++rejected;
        });
    }
    std::cout.flush();
    if (node_failed)
      return exit_status::unavailable;
    if (rejected + source.failed > 0)
      return exit_status::bad_input;
    return exit_status::ok;
  });
}

void setup_submit(CLI::App& app, int& status) {
  auto opts = std::make_shared<submit_options>();
  auto* cmd = app.add_subcommand(
    "submit", "Send tasks to a running node (`tasksup serve`) and print their "
              "ids at once; the node runs them in the background.");
  cmd
    ->add_option("tasks", opts->task_files,
                 "Task files (JSON; docs/BEHAVIOUR.md, Task file); `-` reads "
                 "one task per line "
                 "from stdin (JSON lines)")
    ->required();
  cmd->add_flag("--replace", opts->replace,
                "Run a task again under an id the node knows from a finished "
                "task (its history is replaced; a task still running is "
                "never replaced)");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

All tasks go over one connection, several in flight at once. Each accepted
task's id is printed on its own line, in input order; a task the node
rejects, or a file or line that cannot be read, is reported on stderr with
its file (or <stdin>:LINE) and the reason, and the others are still sent.
Exit status: 0 when every task was accepted, 2 when any was rejected or
unreadable, 3 when the node could not be reached or stopped answering.

The node validates each task against its own config; a rejected task changes
nothing on the node. An agent_cli path such as ./agents/my-agent is taken
relative to the task file's directory (for stdin: the working directory) and
made absolute before sending. A task text over 16 MiB is refused here,
before it is sent. On the node's machine, without --certs, --insecure or
$TASKSUP_CERTS, the tasks go over the node's control socket when it is
there (batches of up to 64; see `tasksup serve --help`). Follow a task
with `tasksup events --follow ID` or `tasksup status ID`.

Examples:
  id=$(tasksup submit config/examples/demo-flaky.json)
  tasksup events --follow "$id"
  tasksup submit a.json b.json c.json
  jq -c . tasks/*.json | tasksup submit -)");
  cmd->callback([opts, &status] { status = submit(*opts); });
}

command_registrar registrar{50, setup_submit};

} // namespace

} // namespace tasksup::app

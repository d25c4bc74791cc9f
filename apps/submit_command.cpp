// `tasksup submit TASK.json...` / `tasksup submit -`: hands tasks to a
// running node over one connection and prints their ids.

#include "commands.hpp"
#include "node_client.hpp"
#include "task_input.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/wire_limits.hpp"
#include "tasksup/supervisor/config.hpp"

#include <boost/json/serialize.hpp>

#include <cstddef>
#include <deque>
#include <filesystem>
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

/// One task ready to send: where it came from (for messages) and its text.
struct task_text {
  std::string where;
  std::string text;
};

/// Yields the tasks of the command line in order: each file, and for `-`
/// each non-blank line of stdin (JSON lines). Unreadable inputs are
/// reported on stderr as they are met and counted in `failed`.
class task_source {
public:
  explicit task_source(std::vector<std::string> files)
    : files_(std::move(files)) {}

  /// The next task, or nullopt when the inputs are exhausted.
  std::optional<task_text> next() {
    for (;;) {
      if (reading_stdin_) {
        if (auto x = next_line())
          return x;
        reading_stdin_ = false;
      }
      if (index_ >= files_.size())
        return std::nullopt;
      auto& file = files_[index_++];
      if (file == "-") {
        reading_stdin_ = true;
        line_ = 0;
        continue;
      }
      auto input = read_task_input(file);
      if (!input) {
        fail(input.error().to_string());
        continue;
      }
      if (auto x = checked(file, std::move(input->text)))
        return x;
    }
  }

  /// Inputs that could not be read or were too large.
  std::size_t failed = 0;

private:
  void fail(const std::string& text) {
    std::cerr << "tasksup submit: " << text << '\n';
    ++failed;
  }

  std::optional<task_text> checked(std::string where, std::string text) {
    if (text.size() > wire::max_task_json_bytes) {
      fail(where + ": the task is " + std::to_string(text.size()) +
           " bytes; a node accepts at most " +
           std::to_string(wire::max_task_json_bytes));
      return std::nullopt;
    }
    return task_text{std::move(where), std::move(text)};
  }

  /// Reads stdin up to the next newline, keeping at most one byte past the
  /// limit so a huge line costs no memory.
  bool read_line(std::string& out) {
    out.clear();
    auto* buf = std::cin.rdbuf();
    bool any = false;
    for (;;) {
      auto c = buf->sbumpc();
      if (c == std::char_traits<char>::eof())
        return any;
      any = true;
      if (c == '\n')
        return true;
      if (out.size() <= wire::max_task_json_bytes)
        out.push_back(static_cast<char>(c));
    }
  }

  std::optional<task_text> next_line() {
    std::string line;
    while (read_line(line)) {
      ++line_;
      if (line.find_first_not_of(" \t\r") == std::string::npos)
        continue;
      auto where = "<stdin>:" + std::to_string(line_);
      if (line.size() > wire::max_task_json_bytes) {
        fail(where + ": the line is longer than " +
             std::to_string(wire::max_task_json_bytes) + " bytes");
        continue;
      }
      auto doc = parse_json_text(line, where);
      if (!doc) {
        fail(doc.error().to_string());
        continue;
      }
      // Relative agent paths are taken relative to the working directory.
      std::error_code ec;
      resolve_agent_paths(*doc, std::filesystem::current_path(ec).string());
      if (auto x = checked(where, boost::json::serialize(*doc)))
        return x;
    }
    return std::nullopt;
  }

  std::vector<std::string> files_;
  std::size_t index_ = 0;
  bool reading_stdin_ = false;
  std::size_t line_ = 0;
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
                 "Task files (JSON, SPEC §12); `-` reads one task per line "
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
before it is sent. Follow a task with `tasksup events --follow ID` or
`tasksup status ID`.

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

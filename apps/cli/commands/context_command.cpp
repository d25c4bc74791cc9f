// `tasksup context`: which node this user's commands talk to, and where its
// state directory is (current_node.hpp); `context use` and `context clear`
// set and forget the current node, as `kubectl config use-context` does.

#include "commands.hpp"
#include "current_node.hpp"
#include "local_control.hpp"
#include "node_address.hpp"
#include "state_dir.hpp"
#include "tls_credentials.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct context_options {
  std::string node;
  std::string state_dir;
  std::string certs;
  /// Print only this: node, state-dir or certs.
  std::string only;
};

/// Where a client command's certificates come from (as node_client.cpp
/// chooses them): --certs, else $TASKSUP_CERTS, else the target's.
std::string certs_dir_of(const context_options& opts, const node_target& t) {
  return client_certs_dir(opts.certs, t.certs_dir);
}

int show(const context_options& opts) {
  auto t = resolve_node_target(opts.node, opts.state_dir);
  auto addr = parse_node_address(t.node);
  if (!addr) {
    std::cerr << "tasksup context: " << addr.error().to_string() << '\n';
    return exit_status::bad_input;
  }
  if (opts.only == "node") {
    std::cout << addr->to_string() << '\n';
    return exit_status::ok;
  }
  if (opts.only == "state-dir") {
    std::cout << t.state_dir << '\n';
    return exit_status::ok;
  }
  if (opts.only == "certs") {
    std::cout << certs_dir_of(opts, t) << '\n';
    return exit_status::ok;
  }
  auto recorded = current_node_path();
  std::cout << "node:           " << addr->to_string() << " (" << t.node_source
            << ")\n"
            << "state dir:      " << t.state_dir << " (" << t.state_dir_source
            << ")\n"
            << "certificates:   " << certs_dir_of(opts, t) << '\n'
            << "control socket: "
            << control_socket_path(t.state_dir, addr->port) << '\n'
            << "current node:   "
            << (read_current_node()
                  ? recorded
                  : std::string{"none recorded"} +
                      (recorded.empty() ? std::string{}
                                        : " (would be " + recorded + ")"))
            << '\n';
  return exit_status::ok;
}

int use(const context_options& opts) {
  auto bad = [](const std::string& text) {
    std::cerr << "tasksup context use: " << text << '\n';
    return exit_status::bad_input;
  };
  auto addr = parse_node_address(opts.node);
  if (!addr)
    return bad(addr.error().to_string());
  current_node x{
    addr->to_string(),
    absolute_dir(opts.state_dir.empty() ? default_state_dir() : opts.state_dir),
    absolute_dir(opts.certs)};
  if (auto written = write_current_node(x); !written)
    return bad(written.error().to_string());
  std::cout << "current node: " << x.node << ", state directory " << x.state_dir
            << " (recorded in " << current_node_path() << ")\n";
  return exit_status::ok;
}

int clear() {
  if (clear_current_node())
    std::cout << "current node forgotten (" << current_node_path() << ")\n";
  else
    std::cout << "no current node was recorded\n";
  return exit_status::ok;
}

void setup_context(CLI::App& app, int& status) {
  auto opts = std::make_shared<context_options>();
  auto* cmd = app.add_subcommand(
    "context", "Show which node this user's commands talk to and where its "
               "state directory (certificates, control socket, http-token) "
               "is; `context use` and `context clear` set and forget the "
               "current node.");
  cmd->add_option("--node", opts->node,
                  "Show what commands given this --node would use");
  cmd->add_option("--state-dir", opts->state_dir,
                  "Show what commands given this --state-dir would use");
  cmd->add_option("--certs", opts->certs,
                  "Show what commands given this --certs would use");
  cmd
    ->add_option("--only", opts->only,
                 "Print only this value, for scripts: node, state-dir or "
                 "certs")
    ->check(CLI::IsMember({"node", "state-dir", "certs"}));
  cmd->footer(node_target_help() + R"(

`tasksup serve` records the node it runs as this user's current node when it
starts listening (in $XDG_CONFIG_HOME/tasksup/current-node, else
~/.config/tasksup/current-node; mode 0600) and removes the record when it
stops cleanly. Precedence, highest first: flags (--node, --state-dir,
--certs), then the environment ($TASKSUP_NODE, $TASKSUP_STATE_DIR,
$TASKSUP_CERTS), then the current node, then the defaults.

Example:
  tasksup context
  cat "$(tasksup context --only state-dir)/http-token"
  tasksup context use --node 127.0.0.1:7500 --state-dir /srv/tasksup
  tasksup context clear)");
  cmd->callback([opts, &status, cmd] {
    if (cmd->get_subcommands().empty())
      status = show(*opts);
  });

  auto use_opts = std::make_shared<context_options>();
  auto* use_cmd = cmd->add_subcommand(
    "use", "Record a node as this user's current node: commands given no "
           "--node or $TASKSUP_NODE talk to it, with its state directory.");
  use_cmd->add_option("--node", use_opts->node, "The node, HOST:PORT")
    ->required();
  use_cmd->add_option("--state-dir", use_opts->state_dir,
                      "Its state directory (default: the default state "
                      "directory)");
  use_cmd->add_option("--certs", use_opts->certs,
                      "The directory of its client certificates, when not "
                      "<state dir>/certs");
  use_cmd->callback([use_opts, &status] { status = use(*use_opts); });
  auto* clear_cmd = cmd->add_subcommand(
    "clear", "Forget the current node: commands go back to the defaults.");
  clear_cmd->callback([&status] { status = clear(); });
}

command_registrar registrar{61, setup_context};

} // namespace

} // namespace tasksup::app

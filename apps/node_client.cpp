#include "node_client.hpp"

#include "actor_setup.hpp"
#include "commands.hpp"
#include "node_address.hpp"
#include "signal_watch.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>

#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>

namespace tasksup::app {

void add_node_option(CLI::App* cmd, std::string& node) {
  cmd->add_option("--node", node,
                  "The node to talk to, HOST:PORT (default: $TASKSUP_NODE, "
                  "else 127.0.0.1:" +
                    std::to_string(default_node_port) + ")");
}

std::string node_help() {
  return "The node is --node HOST:PORT if given, else $TASKSUP_NODE if set, "
         "else 127.0.0.1:" +
         std::to_string(default_node_port) +
         " (where `tasksup serve` listens by default). Exit status 3: the "
         "node could not be reached, did not answer within " +
         std::to_string(node_request_timeout.count()) +
         "s, or refused the request.";
}

int with_node(const std::string& command, const std::string& node,
              bool watch_signals,
              const std::function<int(node_session&)>& body) {
  auto text = node.empty() ? default_node_text() : node;
  auto addr = parse_node_address(text);
  if (!addr) {
    std::cerr << "tasksup " << command << ": " << addr.error().to_string()
              << '\n';
    return exit_status::bad_input;
  }
  std::mutex target_mutex;
  caf::actor target;
  std::unique_ptr<signal_watch> signals;
  if (watch_signals)
    signals = std::make_unique<signal_watch>(
      std::initializer_list<int>{SIGINT, SIGTERM}, [&](int, int count) {
        std::lock_guard<std::mutex> guard{target_mutex};
        if (target)
          caf::anon_send(target, signal_atom::value, count);
      });
  caf::actor_system_config cfg;
  configure_actor_system(cfg, true);
  caf::actor_system sys{cfg};
  auto remote = sys.middleman().remote_actor(addr->host, addr->port);
  if (!remote) {
    std::cerr << "tasksup " << command << ": cannot reach the node at "
              << addr->to_string() << ": " << sys.render(remote.error())
              << " (is `tasksup serve` running there?)\n";
    return exit_status::unavailable;
  }
  caf::scoped_actor self{sys};
  {
    std::lock_guard<std::mutex> guard{target_mutex};
    target = caf::actor_cast<caf::actor>(self);
  }
  node_session session{self, *remote, addr->to_string(), command};
  auto rc = body(session);
  {
    std::lock_guard<std::mutex> guard{target_mutex};
    target = nullptr;
  }
  return rc;
}

int report_request_error(const node_session& s, const caf::error& err,
                         int refusal_status) {
  if (err == caf::sec::request_timeout) {
    std::cerr << "tasksup " << s.command << ": the node at " << s.address
              << " did not answer within " << node_request_timeout.count()
              << "s\n";
    return exit_status::unavailable;
  }
  if (err.category() != protocol_error_category) {
    std::cerr << "tasksup " << s.command << ": the node at " << s.address
              << " failed the request: " << error_text(err) << '\n';
    return exit_status::unavailable;
  }
  std::cerr << "tasksup " << s.command << ": " << error_text(err) << '\n';
  return refusal_status;
}

} // namespace tasksup::app

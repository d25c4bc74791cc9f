#pragma once

// A node whose default agent is a script of the test's, on the process
// runtime: what the control-command tests (forget, pause, quota) start.

#include "tasksup_child.hpp"

#include <boost/json/parse.hpp>

#include <sys/stat.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::test {

/// Writes `script` as DIR/agent.sh (executable) and DIR/config/node.json
/// naming it the default agent "sh" on the process runtime, with the JSON
/// members `extra` (e.g. `"circuit_breaker": {...}`) added; returns the
/// `serve` arguments of a node on a free loopback port with that config and
/// its state in DIR/state.
inline std::vector<std::string> process_node(const scratch& dir,
                                             const std::string& script,
                                             const std::string& extra = {}) {
  auto agent = dir.write("agent.sh", script);
  ::chmod(agent.c_str(), 0755);
  auto config = dir / "config";
  std::filesystem::create_directories(config);
  std::ofstream{config + "/node.json"}
    << R"({"default_agent": {"agent_id": "sh", "agent_cli": ")" << agent
    << R"(", "cli_flags": "", "prompt_as_argument": true},)"
    << R"("default_runtime": "process")" << (extra.empty() ? "" : ", " + extra)
    << "}";
  return {"serve", "--listen",    "127.0.0.1:0", "--config",
          config,  "--state-dir", dir / "state"};
}

/// Kills `node` with SIGKILL and, once it died of it (at most 10 s),
/// starts the node again as `name` with `serve`: the new node's address
/// ("127.0.0.1:PORT"), or nullopt when the old one did not die of SIGKILL
/// or the new one does not listen.
inline std::optional<std::string>
kill_and_restart(const scratch& dir, std::unique_ptr<tasksup_child>& node,
                 const std::string& name,
                 const std::vector<std::string>& serve) {
  node->signal(SIGKILL);
  if (node->wait(std::chrono::seconds{10}) != 128 + SIGKILL)
    return std::nullopt;
  node = std::make_unique<tasksup_child>(dir, name, serve);
  auto port = listening_port(*node);
  if (!port)
    return std::nullopt;
  return "127.0.0.1:" + std::to_string(*port);
}

/// `tasksup status ID --json` of the node at `address`: the task's (or
/// group's) record, empty when it cannot be read.
inline boost::json::object status_of(const scratch& dir,
                                     const std::string& address,
                                     const std::string& id) {
  auto r = run_to_end(dir, {"status", id, "--json", "--node", address});
  if (r.status != 0)
    return {};
  boost::system::error_code ec;
  auto doc = boost::json::parse(r.out, ec);
  if (ec || !doc.is_object())
    return {};
  return doc.get_object();
}

} // namespace tasksup::test

#pragma once

// A node whose default agent is a script of the test's, on the process
// runtime: what the control-command tests (forget, pause, quota) start.

#include "tasksup_child.hpp"

#include <boost/json/parse.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
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

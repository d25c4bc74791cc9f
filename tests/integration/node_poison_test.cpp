// Numbers at the edges from an agent's output: a claude-profile agent that
// reports a cost of 1e308 and 9e18 input tokens on each of two attempts. Each
// figure is finite, their sums are not (or overflow); before, the node hung
// for good summing them (and again after a restart, replaying its journal).
// Now the sums clamp and saturate, and the node keeps answering.

#include "tasksup_child.hpp"

#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/journal/journal_store.hpp"
#include "tasksup/supervisor/bounded_number.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// The agent, with the claude profile (its output read as claude's
/// stream-json): its first two attempts print the poisoned result line and
/// fail; the third prints nothing and succeeds once `gate` exists (so a test
/// can kill the node while it runs). It marks each start in `started-N`.
std::string poisoned_agent(const scratch& dir) {
  auto agent = dir.write(
    "agent.sh",
    "#!/bin/sh\n"
    "touch '" +
      dir.path() +
      "/started-'\"$TASKSUP_ATTEMPT\"\n"
      "if [ \"$TASKSUP_ATTEMPT\" -lt 3 ]; then\n"
      "  echo '{\"type\":\"result\",\"result\":\"ok\",\"total_cost_usd\":1e308,"
      "\"usage\":{\"input_tokens\":9000000000000000000,\"output_tokens\":1}}'\n"
      "  exit 1\n"
      "fi\n"
      "i=0\n"
      "while [ ! -e '" +
      dir.path() +
      "/gate' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
      "exit 0\n");
  ::chmod(agent.c_str(), 0755);
  auto config = dir / "config";
  std::filesystem::create_directories(config);
  std::ofstream{config + "/node.json"}
    << R"({"default_agent": {"agent_id": "claude-like", "profile": "claude",
          "agent_cli": ")"
    << agent << R"(", "cli_flags": ""}, "default_runtime": "process"})";
  return agent;
}

/// `status` of task p1 over the node's TLS port, which must answer.
std::string status_of_p1(const scratch& dir, int port) {
  auto r = run_to_end(
    dir,
    {"status", "p1", "--json", "--node", "127.0.0.1:" + std::to_string(port)},
    20s);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return r.out;
}

const std::string task_line =
  R"({"id": "p1", "prompt": "poison", "supervisor": {"backoff_base_seconds": 0.1}})";

/// Submits task p1 over the node's TLS port.
void submit_p1(const scratch& dir, int port) {
  tasksup_child sub{
    dir,
    "submit",
    {"submit", "--node", "127.0.0.1:" + std::to_string(port), "-"},
    dir.write("task.jsonl", task_line + "\n")};
  INFO(sub.err());
  REQUIRE(sub.wait(30s) == 0);
}

} // namespace

TEST_CASE("poison: a cost of 1e308 and 9e18 tokens on two attempts leave the "
          "node answering, through a kill -9 and a restart",
          "[poison]") {
  scratch dir;
  poisoned_agent(dir);
  std::vector<std::string> serve{"serve",      "--listen",     "127.0.0.1:0",
                                 "--config",   dir / "config", "--state-dir",
                                 dir / "state"};
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  submit_p1(dir, *port);
  // Attempts 1 and 2 reported the poison and failed; attempt 3 waits at the
  // gate. The journal holds both poisoned attempts' figures.
  REQUIRE(eventually([&] { return std::filesystem::exists(dir / "started-3"); },
                     60s));
  status_of_p1(dir, *port);
  node->signal(SIGKILL);
  REQUIRE(node->wait(10s) == 128 + SIGKILL);
  // Restarted on the same state directory, the node replays the task (its
  // sums again) and adopts attempt 3; it answers while doing so.
  node = std::make_unique<tasksup_child>(dir, "node-1", serve);
  port = listening_port(*node);
  INFO(node->err());
  REQUIRE(port);
  status_of_p1(dir, *port);
  dir.write("gate", "");
  CHECK(eventually(
    [&] {
      return status_of_p1(dir, *port).find("succeeded") != std::string::npos;
    },
    60s));
  // Restarted again, the finished task loads from its result.
  node->signal(SIGKILL);
  REQUIRE(node->wait(10s) == 128 + SIGKILL);
  node = std::make_unique<tasksup_child>(dir, "node-2", serve);
  port = listening_port(*node);
  REQUIRE(port);
  CHECK(status_of_p1(dir, *port).find("succeeded") != std::string::npos);
  node->signal(SIGTERM);
  CHECK(node->wait(60s) == 0);
  // What the journal kept: the sums clamped and saturated, not infinite or
  // wrapped to a negative count.
  auto store = journal::journal_store::open({dir / "state"});
  REQUIRE(store);
  auto row = (*store)->task("p1");
  REQUIRE(row);
  REQUIRE(*row);
  REQUIRE((*row)->finished_at);
  auto status = decode_status((*row)->result, "p1");
  REQUIRE(status);
  REQUIRE(status->result);
  auto& meta = status->result->metadata;
  CHECK(meta.total_attempts == 3);
  REQUIRE(meta.cost_usd);
  CHECK(*meta.cost_usd == max_cost_usd);
  REQUIRE(meta.usage);
  CHECK(meta.usage->input_tokens == std::numeric_limits<std::int64_t>::max());
  CHECK(meta.usage->output_tokens == 2);
}

TEST_CASE("poison: without a journal, the poisoned task's status travels over "
          "TLS",
          "[poison]") {
  scratch dir;
  poisoned_agent(dir);
  dir.write("gate", "");
  tasksup_child node{dir,
                     "node",
                     {"serve", "--listen", "127.0.0.1:0", "--config",
                      dir / "config", "--no-journal"}};
  auto port = listening_port(node);
  REQUIRE(port);
  submit_p1(dir, *port);
  CHECK(eventually(
    [&] {
      return status_of_p1(dir, *port).find("succeeded") != std::string::npos;
    },
    60s));
  // The whole listing, and again: the network thread is not stuck.
  auto all = run_to_end(
    dir, {"status", "--node", "127.0.0.1:" + std::to_string(*port)}, 20s);
  CHECK(all.status == 0);
  CHECK(all.out.find("p1") != std::string::npos);
  node.signal(SIGTERM);
  CHECK(node.wait(60s) == 0);
}

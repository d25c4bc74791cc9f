// End-to-end: a `tasksup serve` node on loopback, driven by the control
// commands as a user drives it.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

/// A node on a free loopback port (port 0: the node logs the one it got).
class node {
public:
  explicit node(const scratch& dir)
    : dir_(dir),
      child_(dir, "serve",
             {"serve", "--listen", "127.0.0.1:0", "--config", config_dir(),
              "--work-dir", dir / "node-work", "--state-dir", dir / "state"}) {
    auto port = listening_port(child_);
    if (!port)
      FAIL("the node did not start: " << child_.err());
    address_ = "127.0.0.1:" + std::to_string(*port);
  }

  /// Runs a control command against this node.
  finished cmd(std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address_);
    return run_to_end(dir_, args);
  }

  /// The task's status record, or null when the node does not know it.
  boost::json::object status(const std::string& id) {
    auto r = cmd({"status", id, "--json"});
    if (r.status != 0)
      return {};
    return boost::json::parse(r.out).as_object();
  }

  /// Polls status until `state` (and, for done, any outcome) or deadline.
  bool wait_state(const std::string& id, const std::string& state,
                  std::chrono::milliseconds limit = 20s) {
    return eventually(
      [&] {
        auto s = status(id);
        return s.contains("state") && s.at("state").as_string() == state;
      },
      limit);
  }

  tasksup_child& process() { return child_; }

  const std::string& address() const { return address_; }

private:
  const scratch& dir_;
  tasksup_child child_;
  std::string address_;
};

std::string outcome(const boost::json::object& status) {
  return std::string{status.at("result").as_object().at("outcome").as_string()};
}

/// A task file whose agents are examples (absolute paths).
std::string task_json(const std::string& id, const std::string& agents,
                      const std::string& fallbacks,
                      const std::string& supervisor) {
  return R"({"id": ")" + id + R"(", "prompt": "work",
    "agent_selection": {"agents": [)" +
         agents + R"(], "agent_fallbacks": {)" + fallbacks + R"(}},
    "supervisor": {)" +
         supervisor + "}}";
}

std::string agent(const std::string& id, const std::string& cli,
                  const std::string& flags = "") {
  return R"({"agent_id": ")" + id + R"(", "agent_cli": ")" + cli +
         R"(", "cli_flags": ")" + flags + R"("})";
}

} // namespace

TEST_CASE("serve: tasks are submitted, followed and reported, a bad task is "
          "rejected and the node goes on") {
  scratch dir;
  node n{dir};
  auto sub = n.cmd({"submit", example("demo-flaky.json")});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  CHECK(sub.out == "demo-flaky\n");

  auto follow = n.cmd({"events", "--follow", "demo-flaky"});
  INFO(follow.err);
  REQUIRE(follow.status == 0);
  // Attempt 3 starts after 2 s of backoff, long after the follow began.
  CHECK(follow.out.find("attempt 3: flaky") != std::string::npos);
  CHECK(follow.out.find("task succeeded") != std::string::npos);

  auto st = n.status("demo-flaky");
  REQUIRE(st.at("state").as_string() == "done");
  CHECK(outcome(st) == "succeeded");
  CHECK(st.at("total_attempts").to_number<int>() == 3);

  auto bad = n.cmd({"submit", dir.write("bad.json", R"({"prompt": 7})")});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("rejected by the node") != std::string::npos);
  CHECK(bad.err.find("/prompt") != std::string::npos);
  auto broken = n.cmd({"submit", dir.write("broken.json", "{nope")});
  CHECK(broken.status == 2);

  // Still accepting: a good task after the bad ones runs to its end.
  auto good = n.cmd({"submit", example("demo-crash.json")});
  REQUIRE(good.status == 0);
  REQUIRE(n.wait_state("demo-crash", "done"));
  CHECK(outcome(n.status("demo-crash")) == "succeeded");

  auto table = n.cmd({"status"});
  REQUIRE(table.status == 0);
  CHECK(table.out.find("TASK") == 0);
  CHECK(table.out.find("demo-flaky") != std::string::npos);
  CHECK(table.out.find("demo-crash") != std::string::npos);
  CHECK(table.out.find("succeeded") != std::string::npos);

  auto past = n.cmd({"events", "--json"});
  REQUIRE(past.status == 0);
  auto done = json_lines(past.out);
  REQUIRE(done.size() == 2);
  CHECK(done[0].at("event").as_string() == "task_done");

  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve: stop, kill, retry-now and fallback-now act on live tasks") {
  scratch dir;
  node n{dir};
  auto agents = example("agents/");

  SECTION("stop ends a running task gracefully") {
    REQUIRE(n.cmd({"submit", example("demo-slow.json")}).status == 0);
    REQUIRE(n.wait_state("demo-slow", "running"));
    auto stop = n.cmd({"stop", "demo-slow"});
    CHECK(stop.status == 0);
    REQUIRE(n.wait_state("demo-slow", "done"));
    auto st = n.status("demo-slow");
    CHECK(outcome(st) == "stopped");
    CHECK(st.at("result").at("exit_code").to_number<int>() == 143);
    // Stopping a finished task does nothing, and says so.
    CHECK(n.cmd({"stop", "demo-slow"}).status == 1);
  }

  SECTION("kill ends an agent that ignores SIGTERM at once") {
    auto task =
      dir.write("stubborn.json",
                task_json("stubborn",
                          agent("mule", std::string{TASKSUP_FIXTURES_DIR} +
                                          "/stubborn-agent"),
                          "", R"("stop_grace_s": 120)"));
    REQUIRE(n.cmd({"submit", task}).status == 0);
    REQUIRE(n.wait_state("stubborn", "running"));
    CHECK(n.cmd({"kill", "stubborn"}).status == 0);
    REQUIRE(n.wait_state("stubborn", "done", 10s));
    CHECK(outcome(n.status("stubborn")) == "stopped");
  }

  SECTION("retry-now skips a long backoff") {
    auto task = dir.write(
      "patient.json",
      task_json("patient", agent("f", agents + "flaky-agent", "--succeed-at 2"),
                "", R"("backoff_base_seconds": 600)"));
    REQUIRE(n.cmd({"submit", task}).status == 0);
    REQUIRE(n.wait_state("patient", "backoff"));
    CHECK(n.cmd({"retry-now", "patient"}).status == 0);
    REQUIRE(n.wait_state("patient", "done"));
    CHECK(outcome(n.status("patient")) == "succeeded");
    // The user's request is in the task's history.
    auto d = n.cmd({"describe", "patient"});
    INFO(d.out);
    CHECK(d.out.find("user retry-now: immediate retry requested by user") !=
          std::string::npos);
    // events without TASK prints the journaled task_done, span and time
    // included.
    auto ev = n.cmd({"events", "--json"});
    INFO(ev.out);
    auto at = ev.out.find("\"task_id\":\"patient\"");
    REQUIRE(at != std::string::npos);
    auto line = ev.out.substr(ev.out.rfind('\n', at) + 1);
    line = line.substr(0, line.find('\n'));
    CHECK(line.find("\"event\":\"task_done\"") != std::string::npos);
    CHECK(line.find("\"span_id\":\"") != std::string::npos);
    CHECK(line.find("\"ts\":") != std::string::npos);
  }

  SECTION("fallback-now moves to the next agent") {
    auto task = dir.write(
      "switch.json",
      task_json("switch",
                agent("slow", agents + "slow-agent", "--seconds 600") + "," +
                  agent("quick", agents + "flaky-agent", "--succeed-at 1"),
                R"("slow": "quick")", R"("stop_grace_s": 5)"));
    REQUIRE(n.cmd({"submit", task}).status == 0);
    REQUIRE(n.wait_state("switch", "running"));
    CHECK(n.cmd({"fallback-now", "switch"}).status == 0);
    REQUIRE(n.wait_state("switch", "done"));
    auto st = n.status("switch");
    CHECK(outcome(st) == "succeeded");
    CHECK(st.at("agent_id").as_string() == "quick");
    CHECK(st.at("fallback_count").to_number<int>() == 1);
    // The forced fallback is the user's decision, not a failure of "slow".
    auto agents_json = n.cmd({"agents", "--json"});
    INFO(agents_json.out);
    CHECK(agents_json.out.find("unknown") == std::string::npos);
  }

  SECTION("fallback-now with no next agent changes nothing") {
    auto task = dir.write(
      "alone.json",
      task_json("alone", agent("slow", agents + "slow-agent", "--seconds 600"),
                "", R"("stop_grace_s": 5)"));
    REQUIRE(n.cmd({"submit", task}).status == 0);
    REQUIRE(n.wait_state("alone", "running"));
    auto r = n.cmd({"fallback-now", "alone"});
    CHECK(r.status == 1);
    CHECK(r.out.find("cannot fall back") != std::string::npos);
    // The attempt goes on: the task is neither stopped nor failed.
    auto st = n.status("alone");
    CHECK(st.at("state").as_string() == "running");
    CHECK(st.at("attempt").to_number<int>() == 1);
    CHECK(n.cmd({"kill", "alone"}).status == 0);
  }

  SECTION("events --follow right after submit sees the task from its "
          "first event") {
    // The README's recipe: the task may have started (and even ended)
    // before the follower subscribes.
    auto task = dir.write(
      "quick.json",
      task_json("quick", agent("q", agents + "flaky-agent", "--succeed-at 1"),
                "", ""));
    auto sub = n.cmd({"submit", task});
    REQUIRE(sub.status == 0);
    auto r = n.cmd({"events", "--follow", "--json", "quick"});
    CHECK(r.status == 0);
    std::vector<std::string> kinds;
    std::istringstream lines{r.out};
    for (std::string line; std::getline(lines, line);)
      if (!line.empty())
        kinds.push_back(std::string{
          boost::json::parse(line).as_object().at("event").as_string()});
    REQUIRE(kinds.size() >= 4);
    CHECK(kinds.front() == "task_submitted");
    CHECK(kinds.back() == "task_done");
    CHECK(std::count(kinds.begin(), kinds.end(), "attempt_started") == 1);
  }

  SECTION("an unknown task is refused") {
    auto r = n.cmd({"stop", "no-such-task"});
    CHECK(r.status == 3);
    CHECK(r.err.find("no-such-task") != std::string::npos);
  }

  n.process().signal(SIGINT);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve: SIGTERM stops the running tasks before the node exits") {
  scratch dir;
  node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-slow.json")}).status == 0);
  REQUIRE(n.wait_state("demo-slow", "running"));
  n.process().signal(SIGTERM);
  REQUIRE(n.process().wait(30s) == 0);
  auto log = n.process().err();
  CHECK(log.find("[demo-slow] task stopped") != std::string::npos);
  // The node is gone: a control command says it cannot reach it.
  auto r = n.cmd({"status"});
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node") != std::string::npos);
}

TEST_CASE("serve: a SIGTERM while the node is starting still stops it") {
  scratch dir;
  tasksup_child child{dir,
                      "serve",
                      {"serve", "--listen", "127.0.0.1:0", "--config",
                       config_dir(), "--work-dir", dir / "node-work",
                       "--state-dir", dir / "state"}};
  // Once SIGTERM is blocked the node watches for it (signal_watch), long
  // before it listens: sent now, it arrives while the node starts (or, on a
  // fast start, just after; either way it must stop the node).
  auto blocked = [&] {
    std::ifstream status{"/proc/" + std::to_string(child.pid()) + "/status"};
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("SigBlk:", 0) == 0)
        return (std::stoull(line.substr(7), nullptr, 16) &
                (1ULL << (SIGTERM - 1))) != 0;
    return false;
  };
  REQUIRE(eventually(blocked, 30s));
  child.signal(SIGTERM);
  INFO(child.err());
  CHECK(child.wait(30s) == 0);
  CHECK(child.err().find("shutting down") != std::string::npos);
}

TEST_CASE("serve: a non-loopback --listen needs --allow-remote") {
  scratch dir;
  for (auto addr : {"0.0.0.0:0", "192.0.2.10:7420", "example.com:7420"}) {
    auto r = run_to_end(dir, {"serve", "--listen", addr});
    INFO(addr);
    CHECK(r.status == 2);
    CHECK(r.err.find("--allow-remote") != std::string::npos);
  }
  auto r = run_to_end(dir, {"serve", "--listen", "127.0.0.1"});
  CHECK(r.status == 2);
  CHECK(r.err.find("HOST:PORT") != std::string::npos);
}

TEST_CASE("control commands: an unreachable node exits 3 with a clear "
          "message") {
  scratch dir;
  auto node = "127.0.0.1:" + std::to_string(unused_port());
  for (auto cmd : std::vector<std::vector<std::string>>{
         {"status"},
         {"stop", "x"},
         {"events", "--follow"},
         {"submit", example("demo-flaky.json")}}) {
    cmd.push_back("--node");
    cmd.push_back(node);
    auto r = run_to_end(dir, cmd);
    INFO(cmd.front());
    CHECK(r.status == 3);
    CHECK(r.err.find("cannot reach the node at " + node) != std::string::npos);
  }
}

TEST_CASE("every command has --help with an example") {
  scratch dir;
  for (auto cmd :
       {"run", "serve", "submit", "status", "stop", "kill", "retry-now",
        "fallback-now", "events", "agents", "context", "completion", "man"}) {
    auto r = run_to_end(dir, {cmd, "--help"});
    INFO(cmd);
    CHECK(r.status == 0);
    CHECK(r.out.find("Example") != std::string::npos);
  }
}

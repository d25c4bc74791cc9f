// A node killed with SIGKILL again and again while 200 tasks with mixed
// outcomes run, restarted on the same state directory each time: every task
// ends exactly once, with the outcome its script implies; no attempt is
// counted twice or run twice; no agent process is left.

#include "tasksup_child.hpp"

#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/journal/journal_store.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// How a task's agent behaves, from its prompt ("<kind> <seconds>").
enum class kind { ok, flaky, fatal };

const char* name_of(kind k) {
  return k == kind::ok ? "ok" : k == kind::flaky ? "flaky" : "fatal";
}

/// Whether any process still runs the agent of this test (its path is in
/// its command line).
bool agents_left(const std::string& agent) {
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator{"/proc", ec}) {
    auto cmdline = slurp(entry.path().string() + "/cmdline");
    if (cmdline.find(agent) != std::string::npos)
      return true;
  }
  return false;
}

} // namespace

TEST_CASE("node crash: 10 SIGKILLs during 200 tasks lose nothing and run "
          "nothing twice",
          "[crash]") {
  constexpr int tasks = 200;
  constexpr int kills = 10;
  scratch dir;
  auto ran = dir / "ran.txt";
  // Each start of an agent is recorded (task id and attempt; appends of one
  // short line are atomic). ok: works, then succeeds; flaky: fails its first
  // attempt with a transient error; fatal: a bad key.
  auto agent =
    dir.write("agent.sh", "#!/bin/sh\n"
                          "echo \"$TASKSUP_TASK_ID $TASKSUP_ATTEMPT\" >> '" +
                            ran +
                            "'\n"
                            "set -- $*\n"
                            "case \"$1\" in\n"
                            "  ok) sleep \"$2\"; exit 0 ;;\n"
                            "  flaky) sleep \"$2\"\n"
                            "    if [ \"$TASKSUP_ATTEMPT\" -lt 2 ]; "
                            "then echo 'connection reset' >&2; exit "
                            "1; fi; exit 0 ;;\n"
                            "  *) echo 'Error: Invalid API key' "
                            ">&2; exit 1 ;;\n"
                            "esac\n");
  ::chmod(agent.c_str(), 0755);
  auto config = dir / "config";
  std::filesystem::create_directories(config);
  // One agent fails on purpose in a third of the tasks: its breaker must
  // not end the others.
  std::ofstream{config + "/node.json"}
    << R"({"max_concurrent": 16, "default_agent": {"agent_id": "sh",
          "agent_cli": ")"
    << agent << R"(", "cli_flags": "", "prompt_as_argument": true},
          "default_runtime": "process",
          "circuit_breaker": {"max_failures": 100000}})";
  std::vector<std::string> serve{"serve",      "--listen",    "127.0.0.1:0",
                                 "--config",   config,        "--work-dir",
                                 dir / "work", "--state-dir", dir / "state"};
  std::mt19937 rng{20261122};
  std::map<std::string, kind> expected;
  std::ostringstream lines;
  for (int i = 0; i < tasks; ++i) {
    auto id = "t" + std::to_string(i);
    auto k = static_cast<kind>(rng() % 3);
    expected[id] = k;
    char prompt[32];
    std::snprintf(prompt, sizeof(prompt), "%s 0.%02u", name_of(k),
                  static_cast<unsigned>(rng() % 60));
    lines << R"({"id": ")" << id << R"(", "prompt": ")" << prompt
          << R"(", "supervisor": {"backoff_base_seconds": 0.2}})" << '\n';
  }
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  tasksup_child submit{
    dir,
    "submit",
    {"submit", "--node", "127.0.0.1:" + std::to_string(*port), "-"},
    dir.write("tasks.jsonl", lines.str())};
  INFO(submit.err());
  REQUIRE(submit.wait(60s) == 0);
  // Kill at random points, restart on the same state directory each time.
  for (int k = 1; k <= kills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 700));
    node->signal(SIGKILL);
    REQUIRE(node->wait(10s) == 128 + SIGKILL);
    node =
      std::make_unique<tasksup_child>(dir, "node-" + std::to_string(k), serve);
    port = listening_port(*node);
    INFO(node->err());
    REQUIRE(port);
  }
  auto address = "127.0.0.1:" + std::to_string(*port);
  CHECK(eventually(
    [&] {
      auto r = run_to_end(dir, {"status", "--json", "--node", address});
      return r.status == 0 && r.out.find("\"running\"") == std::string::npos &&
             r.out.find("\"queued\"") == std::string::npos &&
             r.out.find("\"backoff\"") == std::string::npos;
    },
    180s));
  node->signal(SIGTERM);
  CHECK(node->wait(60s) == 0);
  // Nothing of the agents is left running.
  CHECK_FALSE(agents_left(agent));

  // The journal: every task ended once, as its script says.
  auto store = journal::journal_store::open({dir / "state"});
  REQUIRE(store);
  auto rows = (*store)->tasks();
  REQUIRE(rows);
  REQUIRE(rows->size() == expected.size());
  std::map<std::string, std::set<int>> starts;
  {
    std::ifstream in{ran};
    std::string id;
    int attempt = 0;
    while (in >> id >> attempt) {
      INFO("task " << id << " attempt " << attempt);
      // An agent never runs twice for one attempt.
      CHECK(starts[id].insert(attempt).second);
    }
  }
  for (auto& row : *rows) {
    INFO("task " << row.id);
    REQUIRE(row.finished_at);
    auto status = decode_status(row.result, row.id);
    REQUIRE(status);
    REQUIRE(status->result);
    auto& r = *status->result;
    INFO("error: " << r.error.value_or("none"));
    switch (expected.at(row.id)) {
      case kind::ok:
        CHECK(r.outcome == task_outcome::succeeded);
        break;
      case kind::flaky:
        CHECK(r.outcome == task_outcome::succeeded);
        CHECK(r.metadata.total_attempts >= 2);
        break;
      case kind::fatal:
        CHECK(r.outcome == task_outcome::failed);
        break;
    }
    // Each attempt ended once in the journal, numbered 1..total.
    auto records = (*store)->records(row.seq);
    REQUIRE(records);
    std::map<int, int> ended;
    for (auto& rec : *records) {
      auto in = decode_input(rec.body, row.id);
      REQUIRE(in);
      if (auto* e = std::get_if<input::attempt_ended>(&in->in))
        ++ended[e->attempt];
    }
    CHECK(static_cast<int>(ended.size()) == r.metadata.total_attempts);
    for (auto& [attempt, n] : ended) {
      CHECK(n == 1);
      CHECK(attempt >= 1);
      CHECK(attempt <= r.metadata.total_attempts);
    }
  }
}

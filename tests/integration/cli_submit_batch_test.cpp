// Batch submission against a real node: 8 clients submit 2,000 tasks each
// at the same time (half as task files, half as JSON lines on stdin). Every
// client gets every id, in order, and every task runs exactly once.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup::test;

TEST_CASE("submit: 8 parallel batch clients x 2,000 tasks, every id back and "
          "every task run once") {
  constexpr int clients = 8;
  constexpr int per_client = 2000;
  scratch dir;
  // The agent records the task it ran (its prompt is the task id); appends
  // of one short line are atomic.
  auto ran = dir / "ran.txt";
  auto agent = dir.write("record.sh",
                         "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + ran + "'\n");
  ::chmod(agent.c_str(), 0755);
  auto config = dir / "config";
  std::filesystem::create_directories(config);
  std::ofstream{config + "/node.json"}
    << R"({"max_concurrent": 64, "default_agent": {"agent_id": "rec",
          "agent_cli": ")"
    << agent << R"(", "cli_flags": "", "prompt_as_argument": true},
          "default_runtime": "process"})";
  tasksup_child node{dir,
                     "serve",
                     {"serve", "--listen", "127.0.0.1:0", "--config", config,
                      "--work-dir", dir / "node-work", "--state-dir",
                      dir / "state"}};
  auto port = listening_port(node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);

  std::filesystem::create_directories(dir / "tasks");
  std::vector<std::vector<std::string>> ids(clients);
  std::vector<std::unique_ptr<tasksup_child>> submitters;
  for (int c = 0; c < clients; ++c) {
    std::vector<std::string> args{"submit", "--node", address};
    std::ostringstream lines;
    for (int i = 0; i < per_client; ++i) {
      auto id = "c" + std::to_string(c) + "-" + std::to_string(i);
      ids[c].push_back(id);
      auto task = R"({"id": ")" + id + R"(", "prompt": ")" + id + R"("})";
      if (c % 2 == 0)
        args.push_back(dir.write("tasks/" + id + ".json", task));
      else
        lines << task << '\n';
    }
    std::string in = "/dev/null";
    if (c % 2 == 1) {
      args.push_back("-");
      in = dir.write("lines-" + std::to_string(c) + ".jsonl", lines.str());
    }
    submitters.push_back(std::make_unique<tasksup_child>(
      dir, "submit-" + std::to_string(c), args, in));
  }
  for (int c = 0; c < clients; ++c) {
    INFO("client " << c << ": " << submitters[c]->err());
    CHECK(submitters[c]->wait(300s) == 0);
    std::vector<std::string> got;
    std::istringstream out{submitters[c]->out()};
    for (std::string line; std::getline(out, line);)
      got.push_back(line);
    CHECK(got == ids[c]);
  }
  // Every task runs exactly once.
  std::size_t total = clients * per_client;
  auto count_lines = [&] {
    std::ifstream in{ran};
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);)
      ++n;
    return n;
  };
  CHECK(eventually([&] { return count_lines() >= total; }, 600s));
  // Let a duplicate, if any, show up: the node must have nothing left to run.
  CHECK(eventually(
    [&] {
      auto r = run_to_end(dir, {"status", "--json", "--node", address});
      return r.status == 0 && r.out.find("\"running\"") == std::string::npos &&
             r.out.find("\"queued\"") == std::string::npos &&
             r.out.find("\"backoff\"") == std::string::npos;
    },
    60s));
  std::map<std::string, int> runs;
  std::ifstream in{ran};
  for (std::string line; std::getline(in, line);)
    ++runs[line];
  CHECK(runs.size() == total);
  int twice = 0;
  for (auto& kv : runs)
    twice += kv.second > 1;
  CHECK(twice == 0);
  for (int c = 0; c < clients; ++c)
    for (auto& id : ids[c])
      if (runs.count(id) == 0)
        FAIL_CHECK("task " << id << " never ran");
  node.signal(SIGTERM);
  CHECK(node.wait(60s) == 0);
}

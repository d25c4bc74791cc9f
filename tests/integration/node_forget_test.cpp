// `tasksup forget`: a finished task goes from the node, its journal and its
// attempt directories, for good (a restart does not bring it back); a task
// still running is refused; the action is audited in the node's log.

#include "process_node.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup::test;

TEST_CASE("forget: a finished task is gone for good, a running one is "
          "refused, and both are audited",
          "[forget]") {
  scratch dir;
  // The agent ends at once, except for the task whose prompt is "wait":
  // that one runs until the test ends it.
  auto serve = process_node(dir, "#!/bin/sh\n"
                                 "if [ \"$1\" = wait ]; then\n"
                                 "  i=0\n"
                                 "  while [ $i -lt 1200 ]; do sleep 0.05; "
                                 "i=$((i+1)); done\n"
                                 "fi\n"
                                 "exit 0\n");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto submit = [&](const std::string& id, const std::string& prompt) {
    tasksup_child sub{
      dir,
      "submit-" + id,
      {"submit", "--node", address, "-"},
      dir.write(id + ".jsonl",
                R"({"id": ")" + id + R"(", "prompt": ")" + prompt + "\"}\n")};
    INFO(sub.err());
    REQUIRE(sub.wait(30s) == 0);
  };
  // Whether task f1 succeeds within a minute (status over TLS).
  auto f1_succeeds = [&] {
    return eventually(
      [&] {
        auto r = run_to_end(dir, {"status", "f1", "--json", "--node", address});
        return r.status == 0 && r.out.find("succeeded") != std::string::npos;
      },
      60s);
  };
  submit("f1", "done");
  submit("f2", "wait");
  REQUIRE(f1_succeeds());
  REQUIRE(std::filesystem::exists(dir / "state/attempts/f1"));

  // Still running: refused, nothing changes.
  auto running = run_to_end(dir, {"forget", "f2", "--node", address});
  CHECK(running.status == 1);
  CHECK_THAT(running.out, Catch::Contains("task f2 has not finished"));
  // Finished: forgotten, over TLS; its attempt directories go too.
  auto forgot = run_to_end(dir, {"forget", "f1", "--node", address});
  INFO(forgot.err);
  CHECK(forgot.status == 0);
  CHECK_THAT(forgot.out, Catch::Contains("forgot f1"));
  CHECK(run_to_end(dir, {"describe", "f1", "--node", address}).status == 3);
  CHECK_FALSE(std::filesystem::exists(dir / "state/attempts/f1"));
  // Unknown now: exit 3, naming it.
  auto again = run_to_end(dir, {"forget", "f1", "--node", address});
  CHECK(again.status == 3);
  CHECK_THAT(again.err, Catch::Contains("f1"));
  // Both requests are in the node's log as audit lines.
  REQUIRE(eventually(
    [&] {
      auto log = node->err();
      return log.find("asked to forget task 'f1'") != std::string::npos &&
             log.find("asked to forget task 'f2'") != std::string::npos;
    },
    10s));

  // A restart on the same journal does not bring it back, and the id is
  // free for a new task.
  node->signal(SIGTERM);
  REQUIRE(node->wait(60s) == 0);
  node = std::make_unique<tasksup_child>(dir, "node-1", serve);
  port = listening_port(*node);
  REQUIRE(port);
  address = "127.0.0.1:" + std::to_string(*port);
  CHECK(run_to_end(dir, {"describe", "f1", "--node", address}).status == 3);
  submit("f1", "done");
  CHECK(f1_succeeds());
}

TEST_CASE("retention: past --retain-tasks the oldest finished task leaves "
          "status and the journal, describe says when and why, and the "
          "start's log line counts what the journal keeps",
          "[forget]") {
  scratch dir;
  auto serve = process_node(dir, "#!/bin/sh\nexit 0\n");
  serve.insert(serve.end(), {"--retain-tasks", "2"});
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  // One after another: r1 finishes first.
  for (std::string id : {"r1", "r2", "r3"}) {
    tasksup_child sub{dir,
                      "submit-" + id,
                      {"submit", "--node", address, "-"},
                      dir.write(id + ".jsonl", R"({"id": ")" + id +
                                                 R"(", "prompt": "go"})" +
                                                 std::string{"\n"})};
    INFO(sub.err());
    REQUIRE(sub.wait(30s) == 0);
    auto waited = run_to_end(
      dir, std::vector<std::string>{"wait", id, "--node", address}, 30s);
    INFO(waited.err);
    REQUIRE(waited.status == 0);
  }
  auto gone = run_to_end(dir, {"describe", "r1", "--node", address});
  CHECK(gone.status == 3);
  CHECK_THAT(gone.err, Catch::Contains("task 'r1' expired at 20"));
  CHECK_THAT(gone.err, Catch::Contains("the node keeps the 2 most recent "
                                       "finished tasks (--retain-tasks)"));
  auto listed = run_to_end(dir, {"status", "--node", address});
  CHECK(listed.out.find("r1") == std::string::npos);
  CHECK(listed.out.find("r2") != std::string::npos);
  CHECK(listed.out.find("r3") != std::string::npos);

  // Why r1 expired is journaled within a second (node state "expired"),
  // read from the running node's journal, read-only.
  dir.write("state.py",
            "import sqlite3, sys\n"
            "db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', "
            "uri=True)\n"
            "row = db.execute(\"SELECT body FROM node_state WHERE key = "
            "'expired'\").fetchone()\n"
            "body = row[0] if row else b''\n"
            "sys.stdout.write(body.decode() if isinstance(body, bytes) "
            "else body)\n");
  CHECK(eventually(
    [&] {
      auto read = "/usr/bin/python3 " + dir / "state.py" + " " +
                  dir / "state/journal.db" + " > " + dir / "expired.txt";
      return std::system(read.c_str()) == 0 &&
             slurp(dir / "expired.txt").rfind("r1\t", 0) == 0;
    },
    10s));

  // The journal kept what status showed: a restart with the same
  // retention reads two finished tasks and expires none, and still says
  // when and why r1 expired.
  node->signal(SIGTERM);
  REQUIRE(node->wait(60s) == 0);
  node = std::make_unique<tasksup_child>(dir, "node-1", serve);
  auto again = listening_port(*node);
  REQUIRE(again);
  CHECK_THAT(node->err(),
             Catch::Contains("0 unfinished task(s) resume, 2 finished kept, 0 "
                             "expired now; retention: 7 day(s), 2 finished "
                             "tasks"));
  auto still = run_to_end(
    dir, {"describe", "r1", "--node", "127.0.0.1:" + std::to_string(*again)});
  CHECK(still.status == 3);
  CHECK(still.err == gone.err);
  // A smaller count at the next start prunes the journal first.
  node->signal(SIGTERM);
  REQUIRE(node->wait(60s) == 0);
  serve.back() = "1";
  node = std::make_unique<tasksup_child>(dir, "node-2", serve);
  REQUIRE(listening_port(*node));
  CHECK_THAT(node->err(), Catch::Contains("1 finished kept, 1 expired now"));
}

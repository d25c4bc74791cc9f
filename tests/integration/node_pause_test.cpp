// `tasksup pause` and `tasksup resume` on a real node over TLS: a paused
// task starts no attempt, stays paused across a crash and restart of the
// node (the pause is journaled), and goes on when resumed; both are
// audited.

#include "process_node.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

/// The `status --json` record of one task, or null when it cannot be read.
std::string state_of(const boost::json::object& o) {
  auto* s = o.if_contains("state");
  return s && s->is_string() ? std::string{s->get_string()} : std::string{};
}

} // namespace

TEST_CASE("pause and resume: a paused task starts nothing, outlives a "
          "restart, and goes on when resumed",
          "[pause]") {
  scratch dir;
  // The agent fails until the file `go` exists, then succeeds.
  auto go = dir / "go";
  auto serve = process_node(dir,
                            "#!/bin/sh\n"
                            "[ -e '" +
                              go +
                              "' ] && exit 0\n"
                              "sleep 0.2\n"
                              "exit 1\n",
                            R"("circuit_breaker": {"max_failures": 1000000})");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  {
    tasksup_child sub{dir,
                      "submit",
                      {"submit", "--node", address, "-"},
                      // One JSON line: `submit -` reads JSON lines.
                      dir.write("p1.jsonl",
                                R"({"id": "p1", "prompt": "x", )"
                                R"("supervisor": {"max_retries_per_agent": )"
                                R"(1000, "max_total_attempts": 1000, )"
                                R"("backoff": {"retryable": {"kind": )"
                                R"("table", "table_s": [0.1]}}}})"
                                "\n")};
    INFO(sub.err());
    REQUIRE(sub.wait(30s) == 0);
  }
  // It fails and retries until paused.
  REQUIRE(eventually(
    [&] {
      auto* a = status_of(dir, address, "p1").if_contains("attempt");
      return a && a->is_int64() && a->get_int64() >= 2;
    },
    60s));
  auto paused = run_to_end(dir, {"pause", "p1", "--node", address});
  INFO(paused.err);
  CHECK(paused.status == 0);
  CHECK_THAT(paused.out, Catch::Contains("paused p1"));
  // The running attempt (if any) ends; then it is parked.
  REQUIRE(eventually(
    [&] { return state_of(status_of(dir, address, "p1")) == "paused"; }, 60s));
  auto again = run_to_end(dir, {"pause", "p1", "--node", address});
  CHECK(again.status == 1);
  CHECK_THAT(again.out, Catch::Contains("is already paused"));
  auto at_pause = status_of(dir, address, "p1").at("attempt").as_int64();

  REQUIRE(eventually(
    [&] {
      return node->err().find("asked to pause task 'p1'") != std::string::npos;
    },
    10s));
  // A crash of the node (SIGTERM would stop its tasks) and a restart on the
  // same journal: still paused.
  node->signal(SIGKILL);
  node->wait(60s);
  node = std::make_unique<tasksup_child>(dir, "node-1", serve);
  port = listening_port(*node);
  REQUIRE(port);
  address = "127.0.0.1:" + std::to_string(*port);
  REQUIRE(eventually(
    [&] { return state_of(status_of(dir, address, "p1")) == "paused"; }, 60s));
  auto table = run_to_end(dir, {"status", "--node", address});
  CHECK_THAT(table.out, Catch::Contains("p1 waits: resume (paused by user)"));

  // Resumed: the next attempt succeeds; none ran while it was paused.
  std::ofstream{go} << "go\n";
  auto resumed = run_to_end(dir, {"resume", "p1", "--node", address});
  INFO(resumed.err);
  CHECK(resumed.status == 0);
  CHECK_THAT(resumed.out, Catch::Contains("resumed p1"));
  REQUIRE(eventually(
    [&] {
      auto r = run_to_end(dir, {"status", "p1", "--json", "--node", address});
      return r.out.find("\"succeeded\"") != std::string::npos;
    },
    60s));
  auto done = status_of(dir, address, "p1");
  CHECK(done.at("attempt").as_int64() == at_pause + 1);
  CHECK(run_to_end(dir, {"resume", "p1", "--node", address}).status == 1);
  auto events = run_to_end(dir, {"events", "p1", "--node", address});
  CHECK_THAT(events.out, Catch::Contains("paused by user"));
  CHECK_THAT(events.out, Catch::Contains("resumed by user"));
}

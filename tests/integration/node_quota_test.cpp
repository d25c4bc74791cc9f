// A used-up usage quota on a real node: the agent's message names when it
// resets, the task waits for it (its chain has no other agent) without
// spending a retry, the account is closed for a second task too (it never
// starts the agent before the reset), and both go on once it has reset.

#include "process_node.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

boost::json::object record(const scratch& dir, const std::string& address,
                           const std::string& id) {
  auto r = run_to_end(dir, {"status", id, "--json", "--node", address});
  boost::system::error_code ec;
  auto doc = boost::json::parse(r.out, ec);
  if (r.status != 0 || ec || !doc.is_object())
    return {};
  return doc.get_object();
}

std::string text(const boost::json::object& o, const char* key) {
  auto* x = o.if_contains(key);
  return x && x->is_string() ? std::string{x->get_string()} : std::string{};
}

} // namespace

TEST_CASE("quota: a task waits for the reset the agent named, its account "
          "stays closed for others, and no retry is spent",
          "[quota]") {
  scratch dir;
  // The first run hits the plan's limit (in codex's words); every later run
  // succeeds.
  auto hit = dir / "hit";
  auto node = std::make_unique<tasksup_child>(
    dir, "node",
    process_node(dir, "#!/bin/sh\n"
                      "if [ ! -e '" +
                        hit +
                        "' ]; then\n"
                        "  touch '" +
                        hit +
                        "'\n"
                        "  echo \"You've hit your usage limit. Try again in 20 "
                        "seconds.\"\n"
                        "  exit 1\n"
                        "fi\n"
                        "exit 0\n"));
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto submit = [&](const std::string& id) {
    tasksup_child sub{dir,
                      "submit-" + id,
                      {"submit", "--node", address, "-"},
                      dir.write(id + ".jsonl", R"({"id": ")" + id +
                                                 R"(", "prompt": "x"})"
                                                 "\n")};
    INFO(sub.err());
    REQUIRE(sub.wait(30s) == 0);
  };
  submit("q1");
  // q1 waits for the reset...
  REQUIRE(eventually(
    [&] { return text(record(dir, address, "q1"), "state") == "quota_wait"; },
    30s));
  auto waiting = record(dir, address, "q1");
  CHECK(waiting.at("resume_ts").is_number());
  CHECK(text(waiting, "waiting_for").rfind("quota reset of sh at ", 0) == 0);
  // ...and so does q2, without ever starting the agent.
  submit("q2");
  auto q2 = record(dir, address, "q2");
  CHECK(text(q2, "state") == "quota_wait");
  CHECK(q2.at("attempt").as_int64() == 0);
  auto table = run_to_end(dir, {"status", "--node", address});
  CHECK_THAT(table.out, Catch::Contains("quota reset in"));

  // After the reset both succeed; q1 spent no retry on the wait.
  auto succeeded = [&](const char* id) {
    return eventually(
      [&] {
        auto r = run_to_end(dir, {"status", id, "--json", "--node", address});
        return r.out.find("\"succeeded\"") != std::string::npos;
      },
      60s);
  };
  REQUIRE(succeeded("q1"));
  REQUIRE(succeeded("q2"));
  auto done = record(dir, address, "q1");
  CHECK(done.at("attempt").as_int64() == 2);
  CHECK(done.at("retry_count").as_int64() == 0);
  CHECK(record(dir, address, "q2").at("attempt").as_int64() == 1);
  auto history = run_to_end(dir, {"describe", "q1", "--node", address});
  CHECK_THAT(history.out, Catch::Contains("class quota_exhausted"));
  CHECK_THAT(history.out,
             Catch::Contains("decision: wait for the quota of sh"));
  CHECK_THAT(history.out, Catch::Contains("waiting for quota reset at"));
}

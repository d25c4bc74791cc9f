// A preflight that says "not now" (exit 75) end to end: `tasksup run` of a
// real task whose preflight command refuses twice, then lets it through.
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace tasksup::test;

TEST_CASE("a preflight's not now parks the task and tries again later, "
          "spending no retry") {
  scratch dir;
  // Not now for the first two asks (a resource still busy), then yes.
  auto count = dir / "asked";
  auto preflight = dir.write_script(
    "ready.sh", "#!/bin/sh\n"
                "n=$(cat '" +
                  count +
                  "' 2>/dev/null || echo 0)\n"
                  "echo $((n + 1)) > '" +
                  count +
                  "'\n"
                  "if [ \"$n\" -lt 2 ]; then echo \"gpu busy\"; "
                  "exit 75; fi\n");
  auto file = dir.write(
    "nn.json",
    "{\"id\": \"nn1\", \"prompt\": \"p\", \"agent_selection\": {\"agents\": "
    "[{\"agent_id\": \"ok\", \"agent_cli\": \"true\"}]}, \"preflight\": [\"" +
      preflight +
      "\"], \"supervisor\": {\"max_retries_per_agent\": 0, \"backoff\": "
      "{\"not_now\": {\"kind\": \"table\", \"table_s\": [0.1, 0.2]}}}}");
  auto events = dir / "nn.jsonl";
  auto run = run_to_end(dir,
                        {"run", "--config", config_dir(), "--events", events,
                         "--work-dir", dir / "work", file},
                        std::chrono::seconds{120});
  INFO(run.err);
  // With no retry to spend, only waiting could have got it through.
  REQUIRE(run.status == 0);
  CHECK(slurp(count) == "3\n");
  auto evs = json_lines(slurp(events));
  auto classified = of_kind(evs, "classified");
  REQUIRE(classified.size() == 2);
  for (auto& c : classified) {
    CHECK(text_at(c, "class") == "not_now");
    CHECK(text_at(c, "rule") == "preflight_not_now");
    CHECK(text_at(c, "line") == "gpu busy");
  }
  std::vector<std::string> waits;
  for (auto& s : of_kind(evs, "step"))
    if (text_at(s, "step") == "not_now")
      waits.push_back(text_at(s, "message"));
  REQUIRE(waits.size() == 2);
  CHECK(waits[0].find("not now, trying again in 100ms (1 in a row") !=
        std::string::npos);
  CHECK(waits[1].find("not now, trying again in 200ms (2 in a row") !=
        std::string::npos);
  CHECK(of_kind(evs, "retry_scheduled").empty());
  // One attempt ran, the agent's first, after two that never started.
  auto started = of_kind(evs, "attempt_started");
  REQUIRE(started.size() == 1);
  CHECK(started[0].at("attempt").as_int64() == 3);
  auto done = of_kind(evs, "task_done");
  REQUIRE(done.size() == 1);
  CHECK(text_at(done[0], "outcome") == "succeeded");
  auto& meta = done[0].at("metadata").as_object();
  CHECK(meta.at("total_attempts").as_int64() == 1);
  CHECK(meta.at("total_retries").as_int64() == 0);
}

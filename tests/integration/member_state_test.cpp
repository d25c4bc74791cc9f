// A task's state directory (TASKSUP_MEMBER_STATE) end to end: `tasksup run`
// of a real looping agent that keeps a file there from run to run.
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace tasksup::test;

TEST_CASE("a task's state directory outlives its attempts: each run sees "
          "what the run before left there, after a retry and a restart") {
  scratch dir;
  // Run 1 fails (a retry), run 2 exits 0 (a permanent task's restart), run
  // 3 says it is done. Each counts the runs it finds recorded.
  auto agent = dir.write_script(
    "loop.sh",
    "#!/bin/sh\n"
    "s=\"$TASKSUP_MEMBER_STATE\"\n"
    "if [ ! -d \"$s\" ]; then echo \"no state directory: '$s'\"; exit 3; fi\n"
    "n=$(cat \"$s/runs\" 2>/dev/null | wc -l)\n"
    "echo \"found $n runs\"\n"
    "echo \"attempt $TASKSUP_ATTEMPT\" >> \"$s/runs\"\n"
    "if [ \"$n\" = 0 ]; then exit 1; fi\n"
    "if [ \"$n\" = 2 ]; then touch \"$TASKSUP_DONE_FILE\"; fi\n");
  auto file = dir.write(
    "loop.json",
    "{\"id\": \"loop1\", \"prompt\": \"p\", \"agent_selection\": {\"agents\": "
    "[{\"agent_id\": \"loop\", \"agent_cli\": \"" +
      agent +
      "\"}]}, \"supervisor\": {\"restart\": \"permanent\", "
      "\"backoff_base_seconds\": 0.05, \"restart_backoff\": {\"kind\": "
      "\"table\", \"table_s\": [0.05]}}}");
  auto events = dir / "loop.jsonl";
  auto run = run_to_end(dir,
                        {"run", "--config", config_dir(), "--events", events,
                         "--work-dir", dir / "work", file},
                        std::chrono::seconds{120});
  INFO(run.err);
  REQUIRE(run.status == 0);
  auto evs = json_lines(slurp(events));
  auto started = of_kind(evs, "attempt_started");
  REQUIRE(started.size() == 3);
  // One directory for every attempt, under the node's work directory, named
  // in the events.
  auto state = text_at(started[0], "member_state");
  CHECK(state == dir / "work/loop1/state");
  for (auto& s : started)
    CHECK(text_at(s, "member_state") == state);
  std::vector<std::string> found;
  for (auto& e : of_kind(evs, "log"))
    if (text_at(e, "line").rfind("found ", 0) == 0)
      found.push_back(text_at(e, "line"));
  CHECK(found == std::vector<std::string>{"found 0 runs", "found 1 runs",
                                          "found 2 runs"});
  // The failure's was a retry, the exit 0's a restart: the second within
  // the intensity window, which counts the retry before it.
  auto scheduled = of_kind(evs, "retry_scheduled");
  REQUIRE(scheduled.size() == 2);
  CHECK(scheduled[0].at("restart").as_int64() == 0);
  CHECK(scheduled[1].at("restart").as_int64() == 2);
  CHECK(text_at(scheduled[1], "reason")
          .rfind("permanent task exited 0: restarting (restart 2, ran ", 0) ==
        0);
  // Kept when the task ends.
  CHECK(slurp(state + "/runs") == "attempt 1\nattempt 2\nattempt 3\n");
}

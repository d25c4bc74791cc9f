// Groups end to end with real processes: `tasksup run` of a group file whose
// one_for_all restart reruns both members (each keeping its state directory
// and numbering its attempts on), `validate` of good and bad group files,
// and a node that takes a tree by `submit` and answers `status`, `stop`,
// `kill`, `wait`, `events` and `describe` on the group ids.
#include "process_node.hpp"
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <csignal>

#include <boost/json/parse.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace tasksup::test;
using namespace std::chrono_literals;

namespace {

/// The phase of member `id` in a group's `status --json` tree ("" if none).
std::string phase_in(const boost::json::object& status, const std::string& id) {
  auto* tree = status.if_contains("tree");
  if (tree == nullptr || !tree->is_array())
    return {};
  for (auto& row : tree->get_array())
    if (row.is_object() && text_at(row.get_object(), "id") == id)
      return text_at(row.get_object(), "phase");
  return {};
}

/// The `group` events with `change`.
std::vector<boost::json::object>
group_changes(const std::vector<boost::json::object>& evs,
              const std::string& change) {
  std::vector<boost::json::object> out;
  for (auto& e : of_kind(evs, "group"))
    if (text_at(e, "change") == change)
      out.push_back(e);
  return out;
}

} // namespace

TEST_CASE("run of a one_for_all group: a member's failure reruns both "
          "members, each with its state directory and its attempts numbered "
          "on, and the group completes") {
  scratch dir;
  // Each run records itself in its state directory. `flaky` fails its first
  // run; `keeper` holds its first run until the group stops it for the
  // restart, and exits 0 on its second.
  auto flaky = dir.write_script(
    "flaky.sh", "#!/bin/sh\n"
                "s=\"$TASKSUP_MEMBER_STATE\"\n"
                "n=$(cat \"$s/runs\" 2>/dev/null | wc -l)\n"
                "echo \"attempt $TASKSUP_ATTEMPT\" >> \"$s/runs\"\n"
                "sleep 0.3\n"
                "if [ \"$n\" = 0 ]; then exit 1; fi\n");
  auto keeper = dir.write_script(
    "keeper.sh", "#!/bin/sh\n"
                 "s=\"$TASKSUP_MEMBER_STATE\"\n"
                 "n=$(cat \"$s/runs\" 2>/dev/null | wc -l)\n"
                 "echo \"attempt $TASKSUP_ATTEMPT\" >> \"$s/runs\"\n"
                 "if [ \"$n\" = 0 ]; then exec sleep 60; fi\n");
  auto member = [](const std::string& id, const std::string& cli) {
    return "{\"id\": \"" + id +
           "\", \"prompt\": \"p\", \"agent_selection\": {\"agents\": "
           "[{\"agent_id\": \"" +
           id + "\", \"agent_cli\": \"" + cli +
           "\"}]}, \"supervisor\": {\"max_retries_per_agent\": 0, "
           "\"stop_grace_s\": 5}}";
  };
  auto file =
    dir.write("team.json", "{\"group\": {\"id\": \"team\", \"strategy\": "
                           "\"one_for_all\", \"members\": [" +
                             member("keeper", keeper) + ", " +
                             member("flaky", flaky) + "]}}");
  auto checked = run_to_end(dir, {"validate", "--config", config_dir(), file});
  INFO(checked.out << checked.err);
  CHECK(checked.status == 0);
  CHECK_THAT(checked.out, Catch::Contains("group"));
  auto [run, evs] = run_file(dir, "team", file);
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  // Each line of the human view names its task or group.
  CHECK_THAT(run.out, Catch::Contains("[team] restarting keeper, flaky"));
  // One restart decision, caused by flaky's failure, taking both along.
  auto restarts = group_changes(evs, "restart");
  REQUIRE(restarts.size() == 1);
  CHECK(text_at(restarts[0], "member") == "flaky");
  CHECK(text_at(restarts[0], "how") == "failed");
  auto& names = restarts[0].at("members").as_array();
  REQUIRE(names.size() == 2);
  CHECK(names[0].as_string() == "keeper");
  CHECK(names[1].as_string() == "flaky");
  auto ended = group_changes(evs, "ended");
  REQUIRE(ended.size() == 1);
  CHECK(text_at(ended[0], "task_id") == "team");
  CHECK(text_at(ended[0], "how") == "completed");
  CHECK(text_at(ended[0], "outcome") == "succeeded");
  // keeper's first run was stopped by the group, not failed.
  std::vector<std::string> keeper_ends;
  for (auto& e : of_kind(evs, "task_done"))
    if (text_at(e, "task_id") == "keeper")
      keeper_ends.push_back(text_at(e, "outcome"));
  CHECK(keeper_ends == std::vector<std::string>{"stopped", "succeeded"});
  // Each member's second run is its attempt 2, in the same state directory,
  // which kept what the first run wrote.
  for (std::string id : {"keeper", "flaky"}) {
    std::vector<std::int64_t> attempts;
    std::vector<std::string> states;
    for (auto& e : of_kind(evs, "attempt_started"))
      if (text_at(e, "task_id") == id) {
        attempts.push_back(e.at("attempt").as_int64());
        states.push_back(text_at(e, "member_state"));
      }
    CHECK(attempts == std::vector<std::int64_t>{1, 2});
    REQUIRE(states.size() == 2);
    CHECK(states[0] == dir / ("work/" + id + "/state"));
    CHECK(states[1] == states[0]);
    CHECK(slurp(states[0] + "/runs") == "attempt 1\nattempt 2\n");
    CHECK(std::filesystem::is_directory(dir / ("work/" + id + "/attempt-1")));
    CHECK(std::filesystem::is_directory(dir / ("work/" + id + "/attempt-2")));
  }
}

TEST_CASE("validate of group files: a good tree passes, and each bad one "
          "names the file and the JSON pointer") {
  scratch dir;
  auto task = [](const std::string& id) {
    return "{\"id\": \"" + id + "\", \"prompt\": \"p\"}";
  };
  auto good = dir.write(
    "good.json", "{\"group\": {\"id\": \"top\", \"members\": [" + task("a") +
                   ", {\"group\": {\"id\": \"inner\", \"strategy\": "
                   "\"rest_for_one\", \"members\": [" +
                   task("b") + "]}}]}}");
  auto ok = run_to_end(dir, {"validate", "--config", config_dir(), good});
  INFO(ok.out << ok.err);
  CHECK(ok.status == 0);
  auto twice = dir.write("twice.json", "{\"group\": {\"id\": \"top\", "
                                       "\"members\": [" +
                                         task("a") + ", " + task("a") + "]}}");
  auto bad = run_to_end(dir, {"validate", "--config", config_dir(), twice});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Catch::Contains(twice));
  CHECK_THAT(bad.err, Catch::Contains("/group/members/1"));
  auto sig = dir.write("sig.json",
                       "{\"group\": {\"id\": \"top\", \"members\": [{\"id\": "
                       "\"a\", \"prompt\": \"p\", \"significant\": true}]}}");
  auto refused = run_to_end(dir, {"validate", "--config", config_dir(), sig});
  CHECK(refused.status == 2);
  CHECK_THAT(refused.err, Catch::Contains(sig));
  CHECK_THAT(refused.err, Catch::Contains("/group/members/0/significant"));
  // `run` refuses it the same way, before anything runs.
  auto ran = run_to_end(dir, {"run", "--config", config_dir(), sig});
  CHECK(ran.status == 2);
  CHECK_THAT(ran.err, Catch::Contains("/group/members/0/significant"));
}

TEST_CASE("a node runs a submitted tree: status shows it, a nested group "
          "stops alone, a kill ends the rest, and wait, events and describe "
          "answer for the group ids") {
  scratch dir;
  // Every member holds until it is stopped.
  auto serve = process_node(dir, "#!/bin/sh\n"
                                 "echo run >> \"$TASKSUP_MEMBER_STATE/runs\"\n"
                                 "exec sleep 60\n");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto file = dir.write(
    "crew.json",
    R"({"group": {"id": "crew", "members": [)"
    R"({"id": "a", "prompt": "hold", "supervisor": {"stop_grace_s": 5}},)"
    R"({"group": {"id": "inner", "members": [)"
    R"({"id": "b", "prompt": "hold", "supervisor": {"stop_grace_s": 5}}]}}]}})");
  auto sub = run_to_end(dir, {"submit", "--node", address, file});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  CHECK(sub.out == "crew\n");
  // Its ids are the tree's while it runs.
  auto again =
    run_to_end(dir, {"submit", "--node", address,
                     dir.write("b.json", R"({"id": "b", "prompt": "other"})")});
  CHECK(again.status == 2);
  CHECK_THAT(again.err, Catch::Contains("belongs to the running group 'crew'"));
  REQUIRE(eventually(
    [&] {
      auto s = status_of(dir, address, "crew");
      return phase_in(s, "a") == "running" && phase_in(s, "b") == "running";
    },
    30s));
  auto crew = status_of(dir, address, "crew");
  CHECK(text_at(crew, "state") == "running");
  auto& tree = crew.at("tree").as_array();
  REQUIRE(tree.size() == 4);
  std::vector<std::string> rows;
  for (auto& r : tree)
    rows.push_back(std::to_string(r.at("depth").as_int64()) + " " +
                   text_at(r.as_object(), "id") + " " +
                   text_at(r.as_object(), "kind"));
  CHECK(rows == std::vector<std::string>{"0 crew group", "1 a task",
                                         "1 inner group", "2 b task"});
  // The table view shows the tree too.
  auto table = run_to_end(dir, {"status", "crew", "--node", address});
  CHECK(table.status == 0);
  CHECK_THAT(table.out, Catch::Contains("tree:"));
  CHECK_THAT(table.out, Catch::Contains("    b "));
  // A nested group's status is its subtree.
  auto inner = status_of(dir, address, "inner");
  REQUIRE(inner.contains("tree"));
  CHECK(inner.at("tree").as_array().size() == 2);
  // Stopping the nested group stops b; the group above does not restart a
  // member the user stopped, and goes on with a.
  auto stopped = run_to_end(dir, {"stop", "inner", "--node", address});
  INFO(stopped.out << stopped.err);
  CHECK(stopped.status == 0);
  auto inner_wait = run_to_end(dir, {"wait", "inner", "--node", address}, 30s);
  CHECK(inner_wait.status == 130);
  CHECK(text_at(status_of(dir, address, "b"), "state") == "done");
  CHECK(phase_in(status_of(dir, address, "crew"), "a") == "running");
  auto killed = run_to_end(dir, {"kill", "crew", "--node", address});
  CHECK(killed.status == 0);
  auto crew_wait = run_to_end(dir, {"wait", "crew", "--node", address}, 30s);
  CHECK(crew_wait.status == 130);
  auto done = status_of(dir, address, "crew");
  CHECK(text_at(done, "state") == "done");
  CHECK(phase_in(done, "a") == "ended");
  // Its events are its own: the starts, the ends and its end.
  auto evs = run_to_end(dir, {"events", "crew", "--json", "--node", address});
  INFO(evs.err);
  REQUIRE(evs.status == 0);
  auto lines = json_lines(evs.out);
  CHECK(group_changes(lines, "started").size() == 1);
  CHECK(group_changes(lines, "member_started").size() == 2);
  auto end = group_changes(lines, "ended");
  REQUIRE(end.size() == 1);
  CHECK(text_at(end[0], "how") == "stopped");
  CHECK(text_at(end[0], "outcome") == "stopped");
  auto described = run_to_end(dir, {"describe", "crew", "--node", address});
  INFO(described.err);
  CHECK(described.status == 0);
  CHECK_THAT(described.out, Catch::Contains("group: ended stopped"));
  // Each member ran once: nothing restarted what the user stopped.
  CHECK(slurp(dir / "state/attempts/a/state/runs") == "run\n");
}

TEST_CASE("a node killed with SIGKILL while a tree runs resumes the tree: "
          "its running members are found again, not rerun, its restart "
          "window is kept, and its history goes on") {
  scratch dir;
  auto trip = dir / "trip";
  // Each run records itself in its member's state directory. `once` fails
  // its first run and holds after; `trip` holds until the test creates
  // DIR/trip (at most 120 s), then fails; anything else holds.
  auto serve = process_node(
    dir, "#!/bin/sh\n"
         "s=\"$TASKSUP_MEMBER_STATE\"\n"
         "n=$(cat \"$s/runs\" 2>/dev/null | wc -l)\n"
         "echo \"attempt $TASKSUP_ATTEMPT\" >> \"$s/runs\"\n"
         "case \"$1\" in\n"
         "  once) if [ \"$n\" = 0 ]; then exit 1; fi; exec sleep 120 ;;\n"
         "  trip) i=0\n"
         "    while [ ! -e '" +
           trip +
           "' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
           "    exit 1 ;;\n"
           "  *) exec sleep 120 ;;\n"
           "esac\n");
  auto member = [](const std::string& id, const std::string& prompt) {
    return R"({"id": ")" + id + R"(", "prompt": ")" + prompt +
           R"(", "supervisor": {"max_retries_per_agent": 0,
               "stop_grace_s": 5}})";
  };
  // One restart in the hour is allowed: a's is the one.
  auto file = dir.write(
    "crew.json",
    R"({"group": {"id": "crew", "intensity": {"max_restarts": 1,
        "period_s": 3600}, "members": [)" +
      member("a", "once") + R"(, {"group": {"id": "inner", "members": [)" +
      member("b", "hold") + "]}}, " + member("c", "trip") + "]}}");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto sub = run_to_end(dir, {"submit", "--node", address, file});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  auto runs_of = [&](const std::string& id) {
    return slurp(dir / ("state/attempts/" + id + "/state/runs"));
  };
  auto all_running = [&] {
    auto s = status_of(dir, address, "crew");
    return phase_in(s, "a") == "running" && phase_in(s, "b") == "running" &&
           phase_in(s, "c") == "running";
  };
  REQUIRE(eventually(
    [&] { return runs_of("a") == "attempt 1\nattempt 2\n" && all_running(); },
    60s));
  auto restarted = kill_and_restart(dir, node, "node-1", serve);
  REQUIRE(restarted);
  address = *restarted;
  // The tree is back, its members running as they were: no run again.
  REQUIRE(eventually(all_running, 60s));
  auto crew = status_of(dir, address, "crew");
  CHECK(text_at(crew, "state") == "running");
  auto& tree = crew.at("tree").as_array();
  REQUIRE(tree.size() == 5);
  CHECK(tree[0].at("restarts").as_int64() == 1);
  CHECK(tree[1].at("restarts").as_int64() == 1);
  CHECK(text_at(tree[1].as_object(), "last") == "failed");
  CHECK(runs_of("a") == "attempt 1\nattempt 2\n");
  CHECK(runs_of("b") == "attempt 1\n");
  CHECK(runs_of("c") == "attempt 1\n");
  // Its ids are still the tree's.
  auto again =
    run_to_end(dir, {"submit", "--node", address,
                     dir.write("b.json", R"({"id": "b", "prompt": "x"})")});
  CHECK(again.status == 2);
  // c's failure is a second restart within the hour: the group gives up.
  dir.write("trip", "");
  auto waited = run_to_end(dir, {"wait", "crew", "--node", address}, 60s);
  INFO(waited.out << waited.err);
  CHECK(waited.status != 0);
  auto done = status_of(dir, address, "crew");
  CHECK(text_at(done, "state") == "done");
  CHECK_THAT(text_at(done.at("result").as_object(), "error"),
             Catch::Contains("more restarts than its intensity allows"));
  CHECK(runs_of("c") == "attempt 1\n");
  // Its history has both sides of the crash: a's restart before it, the
  // end after.
  auto evs = run_to_end(dir, {"events", "crew", "--json", "--node", address});
  REQUIRE(evs.status == 0);
  auto lines = json_lines(evs.out);
  auto restarts = group_changes(lines, "restart");
  REQUIRE(restarts.size() == 1);
  CHECK(text_at(restarts[0], "member") == "a");
  auto end = group_changes(lines, "ended");
  REQUIRE(end.size() == 1);
  CHECK(text_at(end[0], "how") == "intensity");
  CHECK(text_at(end[0], "member") == "c");
  // Ended, it stays ended across another restart.
  restarted = kill_and_restart(dir, node, "node-2", serve);
  REQUIRE(restarted);
  address = *restarted;
  auto after = status_of(dir, address, "crew");
  CHECK(text_at(after, "state") == "done");
  CHECK(phase_in(after, "a") == "ended");
  CHECK(phase_in(after, "b") == "ended");
}

TEST_CASE("a workflow runs its steps as their dependencies succeed: a failed "
          "step skips the steps after it, the others run, and run, validate "
          "and a node's status, wait and events say so") {
  scratch dir;
  // Each step's agent records its task id; "fail" exits 1.
  auto agent =
    dir.write_script("step.sh", "#!/bin/sh\n"
                                "echo \"$TASKSUP_TASK_ID\" >> '" +
                                  dir / "ran.txt" +
                                  "'\n"
                                  "sleep 0.2\n"
                                  "if [ \"$1\" = fail ]; then exit 1; fi\n");
  auto step = [&](const std::string& id, const std::string& prompt,
                  const std::string& deps) {
    return R"({"id": ")" + id + R"(", "depends_on": [)" + deps +
           R"(], "task": {"prompt": ")" + prompt +
           R"(", "agent_selection": {"agents": [{"agent_id": "sh", "agent_cli": ")" +
           agent +
           R"(", "cli_flags": "", "prompt_as_argument": true}]},
             "supervisor": {"max_retries_per_agent": 0}}})";
  };
  auto file = dir.write("wf.json", R"({"id": "fix", "steps": [)" +
                                     step("plan", "ok", "") + ", " +
                                     step("code", "fail", R"("plan")") + ", " +
                                     step("review", "ok", R"("code")") + ", " +
                                     step("docs", "ok", R"("plan")") + "]}");
  auto checked = run_to_end(dir, {"validate", "--config", config_dir(), file});
  INFO(checked.out << checked.err);
  CHECK(checked.status == 0);
  CHECK_THAT(checked.out, Catch::Contains("workflow"));
  auto [ran, evs] = run_file(dir, "fix", file);
  INFO(ran.out << ran.err);
  CHECK(ran.status != 0);
  CHECK_THAT(ran.out, Catch::Contains("step 'fix.review' skipped"));
  // plan first; code and docs after it; review never.
  auto order = slurp(dir / "ran.txt");
  CHECK(order.rfind("fix.plan\n", 0) == 0);
  CHECK(order.find("fix.code") != std::string::npos);
  CHECK(order.find("fix.docs") != std::string::npos);
  CHECK(order.find("fix.review") == std::string::npos);
  auto skipped = group_changes(evs, "member_skipped");
  REQUIRE(skipped.size() == 1);
  CHECK(text_at(skipped[0], "member") == "fix.review");
  CHECK(text_at(skipped[0], "how") == "fix.code");
  auto ended = group_changes(evs, "ended");
  REQUIRE(ended.size() == 1);
  CHECK(text_at(ended[0], "outcome") == "failed");
  CHECK(text_at(ended[0], "member") == "fix.code");
  // On a node: submitted, waited for, its tree shown.
  std::filesystem::remove(dir / "ran.txt");
  auto serve = process_node(dir, "#!/bin/sh\nexit 0\n");
  tasksup_child node{dir, "node", serve};
  auto port = listening_port(node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto sub = run_to_end(dir, {"submit", "--node", address, file});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  CHECK(sub.out == "fix\n");
  auto waited = run_to_end(dir, {"wait", "fix", "--node", address}, 60s);
  CHECK(waited.status != 0);
  auto s = status_of(dir, address, "fix");
  CHECK(text_at(s, "state") == "done");
  CHECK(phase_in(s, "fix.plan") == "ended");
  CHECK(phase_in(s, "fix.docs") == "ended");
  CHECK(phase_in(s, "fix.review") == "skipped");
  CHECK(text_at(status_of(dir, address, "fix.docs"), "state") == "done");
  CHECK(status_of(dir, address, "fix.review").empty());
}

TEST_CASE("the shipped workflow example runs: plan first, code (after a "
          "retry) and docs after it, review last, and succeeds") {
  scratch dir;
  auto [ran, evs] = run_file(dir, "wf", example("workflow-demo.json"));
  INFO(ran.out << ran.err);
  REQUIRE(ran.status == 0);
  std::vector<std::string> started;
  for (auto& e : group_changes(evs, "member_started"))
    started.push_back(text_at(e, "member"));
  REQUIRE(started.size() == 4);
  CHECK(started.front() == "demo-workflow.plan");
  CHECK(started.back() == "demo-workflow.review");
  auto ended = group_changes(evs, "ended");
  REQUIRE(ended.size() == 1);
  CHECK(text_at(ended[0], "outcome") == "succeeded");
  // code failed its first attempt with a transient error and was retried
  // inside its own task; the workflow saw one run of it.
  std::vector<std::int64_t> attempts;
  for (auto& e : of_kind(evs, "attempt_started"))
    if (text_at(e, "task_id") == "demo-workflow.code")
      attempts.push_back(e.at("attempt").as_int64());
  CHECK(attempts == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("a workflow step with a role must answer its schema: an invalid "
          "answer is invalid_output and retried with the schema errors as "
          "feedback, the checked answer is in the result and fills the next "
          "step's prompt and inputs") {
  scratch dir;
  // The planner's first attempt answers with no steps; its second reads the
  // feedback and answers as the planner role's schema says.
  auto planner = dir.write_script(
    "plan.sh",
    "#!/bin/sh\n"
    "echo 'thinking...'\n"
    "echo '```json'\n"
    "if [ \"$TASKSUP_ATTEMPT\" = 1 ]; then\n"
    "  echo '{\"summary\": \"guess\"}'\n"
    "else\n"
    "  cp \"$TASKSUP_FEEDBACK\" '" +
      dir / "feedback.txt" +
      "'\n"
      "  echo '{\"summary\": \"check the token\", \"steps\": [\"a\", \"b\"]}'\n"
      "fi\n"
      "echo '```'\n");
  // The coder records the prompt it got and the inputs file.
  auto coder = dir.write_script("code.sh", "#!/bin/sh\n"
                                           "printf '%s' \"$1\" > '" +
                                             dir / "prompt.txt" +
                                             "'\n"
                                             "cp \"$TASKSUP_INPUTS\" '" +
                                             dir / "inputs.json" + "'\n");
  auto agents = [](const std::string& cli) {
    return R"("agent_selection": {"agents": [{"agent_id": "sh", "agent_cli": ")" +
           cli + R"(", "cli_flags": "", "prompt_as_argument": true}]})";
  };
  auto file = dir.write("wf.json",
                        R"({"id": "fix", "steps": [
      {"id": "plan", "task": {"prompt": "fix the login", "role": "planner",
        "supervisor": {"backoff_base_seconds": 0.1}, )" +
                          agents(planner) + R"(}},
      {"id": "code", "depends_on": ["plan"], "task": {
        "prompt": "Do: {{steps.plan.answer.summary}}", )" +
                          agents(coder) + R"(}}]})");
  auto [ran, evs] = run_file(dir, "fix", file);
  INFO(ran.out << ran.err);
  REQUIRE(ran.status == 0);
  // Attempt 1 was refused for its answer, by the schema's pointer.
  std::vector<std::string> classes;
  for (auto& e : of_kind(evs, "classified"))
    if (text_at(e, "task_id") == "fix.plan")
      classes.push_back(text_at(e, "class"));
  CHECK(classes == std::vector<std::string>{"invalid_output"});
  auto feedback = slurp(dir / "feedback.txt");
  CHECK_THAT(feedback, Catch::Contains("invalid_output"));
  CHECK_THAT(feedback, Catch::Contains("Missing required property 'steps'"));
  // The answer is the plan's result.
  bool answered = false;
  for (auto& e : of_kind(evs, "task_done"))
    if (text_at(e, "task_id") == "fix.plan") {
      auto* answer = e.if_contains("answer");
      REQUIRE(answer);
      CHECK(text_at(answer->as_object(), "summary") == "check the token");
      answered = true;
    }
  CHECK(answered);
  // The next step got the field in its prompt and the answer in its inputs.
  CHECK(slurp(dir / "prompt.txt") == "Do: check the token");
  auto inputs = boost::json::parse(slurp(dir / "inputs.json")).as_object();
  auto& plan = inputs.at("steps").at("plan").as_object();
  CHECK(plan.at("answer").at("steps").as_array().size() == 2);
}

TEST_CASE("a node killed with SIGKILL mid-workflow resumes it: finished "
          "steps are not run again, running racers of a best-of-2 step are "
          "adopted, the race and the steps after it go on, and no step runs "
          "twice") {
  scratch dir;
  auto ran_file = dir / "ran.txt";
  auto trip = dir / "trip";
  // Every run records its task id; `plan` answers, `hold` waits for
  // DIR/trip (at most 120 s) and succeeds, `forever` holds, anything else
  // records the prompt it got.
  auto serve = process_node(
    dir, "#!/bin/sh\n"
         "echo \"$TASKSUP_TASK_ID\" >> '" +
           ran_file +
           "'\n"
           "case \"$1\" in\n"
           "  plan) echo '```json'; echo '{\"summary\": \"check the "
           "token\"}'; echo '```' ;;\n"
           "  hold) i=0\n"
           "    while [ ! -e '" +
           trip +
           "' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done ;;\n"
           "  forever) exec sleep 120 ;;\n"
           "  *) printf '%s' \"$1\" > '" +
           dir / "prompt-" +
           "'\"$TASKSUP_TASK_ID\" ;;\n"
           "esac\n");
  auto agent = dir / "agent.sh";
  auto settings = std::string{
    R"("supervisor": {"max_retries_per_agent": 0, "stop_grace_s": 5})"};
  auto racer = [&](const std::string& id, const std::string& style) {
    return R"({"agent_id": ")" + id + R"(", "agent_cli": ")" + agent +
           R"(", "cli_flags": ")" + style + R"(", "prompt_as_argument": true})";
  };
  auto file =
    dir.write("wf.json",
              R"({"id": "wf", "steps": [
      {"id": "plan", "task": {"prompt": "plan", )" +
                settings + R"(, "answer_schema": {"type": "object",
        "required": ["summary"],
        "properties": {"summary": {"type": "string"}}}}},
      {"id": "docs", "depends_on": ["plan"], "task": {"prompt": "docs", )" +
                settings + R"(}},
      {"id": "code", "depends_on": ["plan"], "best_of": 2, "task": {
        "prompt": "code", )" +
                settings + R"(, "agent_selection": {"agents": [)" +
                racer("a", "hold") + ", " + racer("b", "forever") + R"(]}}},
      {"id": "review", "depends_on": ["code"], "task": {
        "prompt": "Review: {{steps.plan.answer.summary}}", )" +
                settings + "}}]}");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto sub = run_to_end(dir, {"submit", "--node", address, file});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  auto racing = [&] {
    auto s = status_of(dir, address, "wf");
    return phase_in(s, "wf.plan") == "ended" &&
           phase_in(s, "wf.docs") == "ended" &&
           phase_in(s, "wf.code.1") == "running" &&
           phase_in(s, "wf.code.2") == "running";
  };
  // Each run once so far, in some order.
  auto runs = [&] {
    auto lines = slurp(ran_file);
    std::vector<std::string> out;
    for (std::size_t at = 0, nl;
         (nl = lines.find('\n', at)) != std::string::npos; at = nl + 1)
      out.push_back(lines.substr(at, nl - at));
    std::sort(out.begin(), out.end());
    return out;
  };
  auto so_far =
    std::vector<std::string>{"wf.code.1", "wf.code.2", "wf.docs", "wf.plan"};
  REQUIRE(eventually([&] { return racing() && runs() == so_far; }, 60s));
  auto restarted = kill_and_restart(dir, node, "node-1", serve);
  REQUIRE(restarted);
  address = *restarted;
  // Back as it was: the racers found again, nothing run again.
  REQUIRE(eventually(racing, 60s));
  CHECK(runs() == so_far);
  CHECK(text_at(status_of(dir, address, "wf"), "state") == "running");
  // Racer 1 (agent a) succeeds: it wins, racer 2 is stopped, and the
  // review runs with the plan's answer, journaled before the crash.
  dir.write("trip", "");
  auto waited = run_to_end(dir, {"wait", "wf", "--node", address}, 60s);
  INFO(waited.out << waited.err);
  CHECK(waited.status == 0);
  CHECK(runs() == std::vector<std::string>{"wf.code.1", "wf.code.2", "wf.docs",
                                           "wf.plan", "wf.review"});
  CHECK(slurp(dir / "prompt-wf.review") == "Review: check the token");
  auto code = status_of(dir, address, "wf.code");
  CHECK(text_at(code, "state") == "done");
  CHECK(text_at(code.at("result").as_object(), "outcome") == "succeeded");
  auto loser = status_of(dir, address, "wf.code.2");
  CHECK(text_at(loser.at("result").as_object(), "outcome") == "stopped");
  auto evs =
    run_to_end(dir, {"events", "wf.code", "--json", "--node", address});
  REQUIRE(evs.status == 0);
  auto end = group_changes(json_lines(evs.out), "ended");
  REQUIRE(end.size() == 1);
  CHECK(text_at(end[0], "how") == "won");
  CHECK(text_at(end[0], "member") == "wf.code.1");
}

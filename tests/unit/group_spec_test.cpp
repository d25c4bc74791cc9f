// Group documents: what parses, and the errors (file and JSON pointer) for
// what a group must not be.

#include "tasksup/supervisor/group_spec.hpp"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <string>

using namespace tasksup;

namespace {

std::string task(const std::string& id, const std::string& extra = "") {
  return R"({"id": ")" + id +
         R"(", "prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]})" +
         extra + "}";
}

expected<group_spec> parse(const std::string& text) {
  // As a file is read: JSON nested up to 64 levels.
  auto doc = parse_json_text(text, "team.json");
  REQUIRE(doc);
  return parse_group(*doc, "team.json", builtin_config());
}

/// The error's JSON pointer and text, for a document that must not parse.
error failure(const std::string& text) {
  auto g = parse(text);
  REQUIRE_FALSE(g);
  return g.error();
}

} // namespace

TEST_CASE("group file: a tree with every key parses, ids in start order") {
  auto g = parse(
    R"({"group": {"id": "team", "strategy": "rest_for_one",
    "intensity": {"max_restarts": 5, "period_s": 30},
    "auto_shutdown": "any_significant",
    "members": [)" +
    task("planner",
         R"(, "supervisor": {"restart": "transient"}, "significant": true)") +
    R"(, {"group": {"id": "workers", "strategy": "one_for_all",
                      "restart": "transient",
                      "members": [)" +
    task("w1") + "," + task("w2") + R"(]}},)" +
    task("reviewer", R"(, "supervisor": {"restart": "temporary"})") + "]}}");
  REQUIRE(g);
  CHECK(g->id == "team");
  CHECK(g->strategy == group_strategy::rest_for_one);
  CHECK(g->intensity.max_restarts == 5);
  CHECK(g->intensity.period_s == 30);
  CHECK(g->shutdown == auto_shutdown::any_significant);
  REQUIRE(g->members.size() == 3);
  CHECK(g->members[0].id == "planner");
  CHECK(g->members[0].significant);
  CHECK(g->members[0].restart == restart_type::transient);
  REQUIRE(g->members[0].task);
  CHECK(g->members[0].task->prompt == "p");
  REQUIRE(g->members[1].group);
  CHECK(g->members[1].restart == restart_type::transient);
  CHECK(g->members[1].group->strategy == group_strategy::one_for_all);
  CHECK(g->members[2].restart == restart_type::temporary);
  CHECK(tree_ids(*g) == std::vector<std::string>{"team", "planner", "workers",
                                                 "w1", "w2", "reviewer"});
  auto s = g->shape();
  CHECK(s.members.size() == 3);
  CHECK(s.members[1].id == "workers");
  CHECK(is_group_document(boost::json::parse(R"({"group": {}})")));
  CHECK_FALSE(is_group_document(boost::json::parse(task("x"))));
}

TEST_CASE("group file: defaults are one_for_one, 3 restarts in 60 s, "
          "auto_shutdown never, a task member is transient, a group member "
          "permanent") {
  auto g =
    parse(R"({"group": {"id": "g", "members": [)" + task("t") +
          R"(, {"group": {"id": "sub", "members": [)" + task("u") + "]}}]}}");
  REQUIRE(g);
  CHECK(g->strategy == group_strategy::one_for_one);
  CHECK(g->intensity.max_restarts == 3);
  CHECK(g->intensity.period_s == 60);
  CHECK(g->shutdown == auto_shutdown::never);
  CHECK(g->members[0].restart == restart_type::transient);
  CHECK(g->members[1].restart == restart_type::permanent);
}

TEST_CASE("group file: a group that contains itself is refused at the inner "
          "group's id") {
  auto err = failure(R"({"group": {"id": "team", "members": [
    {"group": {"id": "sub", "members": [
      {"group": {"id": "team", "members": [)" +
                     task("t") + "]}}]}}]}}");
  CHECK(err.where == "team.json");
  CHECK(err.path == "/group/members/0/group/members/0/group/id");
  CHECK(err.what.find("group \"team\" contains itself") != std::string::npos);
  CHECK(err.what.find("/group") != std::string::npos);
}

TEST_CASE("group file: an id used twice anywhere in the tree is refused at "
          "the second, naming the first") {
  SECTION("two members") {
    auto err = failure(R"({"group": {"id": "g", "members": [)" + task("a") +
                       "," + task("a") + "]}}");
    CHECK(err.path == "/group/members/1/id");
    CHECK(err.what.find("duplicate id \"a\": /group/members/0/id has it too") !=
          std::string::npos);
  }
  SECTION("a task in a subgroup and one above it") {
    auto err =
      failure(R"({"group": {"id": "g", "members": [)" + task("a") +
              R"(, {"group": {"id": "s", "members": [)" + task("a") + "]}}]}}");
    CHECK(err.path == "/group/members/1/group/members/0/id");
  }
  SECTION("a task named like a group") {
    auto err =
      failure(R"({"group": {"id": "g", "members": [)" + task("g") + "]}}");
    CHECK(err.path == "/group/members/0/id");
  }
}

TEST_CASE("group file: a significant member is refused where OTP refuses "
          "one") {
  SECTION("auto_shutdown never (the default)") {
    auto err = failure(R"({"group": {"id": "g", "members": [)" +
                       task("a", R"(, "significant": true)") + "]}}");
    CHECK(err.path == "/group/members/0/significant");
    CHECK(err.what.find("\"auto_shutdown\"") != std::string::npos);
  }
  SECTION("a permanent member") {
    auto err = failure(
      R"({"group": {"id": "g", "auto_shutdown": "all_significant", "members": [)" +
      task("a",
           R"(, "significant": true, "supervisor": {"restart": "permanent"})") +
      "]}}");
    CHECK(err.path == "/group/members/0/significant");
    CHECK(err.what.find("a permanent member cannot be significant") !=
          std::string::npos);
  }
  SECTION("a group member is permanent unless it says otherwise") {
    auto err = failure(
      R"({"group": {"id": "g", "auto_shutdown": "any_significant", "members": [
        {"group": {"id": "s", "significant": true, "members": [)" +
      task("a") + "]}}]}}");
    CHECK(err.path == "/group/members/0/group/significant");
  }
  SECTION("significant is true or false") {
    auto err = failure(R"({"group": {"id": "g", "members": [)" +
                       task("a", R"(, "significant": "yes")") + "]}}");
    CHECK(err.path == "/group/members/0/significant");
  }
}

TEST_CASE("group file: intensity values out of range are refused") {
  auto with = [](const std::string& intensity) {
    return failure(R"({"group": {"id": "g", "intensity": )" + intensity +
                   R"(, "members": [)" + task("a") + "]}}");
  };
  CHECK(with(R"({"max_restarts": -1})").path ==
        "/group/intensity/max_restarts");
  CHECK(with(R"({"max_restarts": 1.5})").path ==
        "/group/intensity/max_restarts");
  CHECK(with(R"({"max_restarts": 1000001})").path ==
        "/group/intensity/max_restarts");
  CHECK(with(R"({"period_s": 0})").path == "/group/intensity/period_s");
  CHECK(with(R"({"period_s": -5})").path == "/group/intensity/period_s");
  CHECK(with(R"({"period_s": 1e30})").path == "/group/intensity/period_s");
  CHECK(with(R"({"reset_after_s": 5})").path ==
        "/group/intensity/reset_after_s");
}

TEST_CASE("group file: other mistakes name their pointer") {
  CHECK(failure(R"({"group": {"id": "g", "members": []}})").path ==
        "/group/members");
  CHECK(failure(R"({"group": {"id": "g"}})").what.find("\"members\"") !=
        std::string::npos);
  CHECK(failure(R"({"group": {"id": "g", "strategy": "simple_one_for_one",
                  "members": [)" +
                task("a") + "]}}")
          .path == "/group/strategy");
  CHECK(failure(R"({"group": {"id": "g", "auto_shutdown": "some",
                  "members": [)" +
                task("a") + "]}}")
          .path == "/group/auto_shutdown");
  CHECK(failure(R"({"group": {"id": "g", "restart": "permanent",
                  "members": [)" +
                task("a") + "]}}")
          .path == "/group/restart");
  CHECK(failure(R"({"group": {"id": "../g", "members": [)" + task("a") + "]}}")
          .path == "/group/id");
  CHECK(
    failure(R"({"group": {"id": "g", "members": [{"prompt": "p"}]}})").path ==
    "/group/members/0");
  // A member task's own error, at its pointer within the group file.
  auto err =
    failure(R"({"group": {"id": "g", "members": [)" +
            task("a", R"(, "supervisor": {"restart": "sometimes"})") + "]}}");
  CHECK(err.where == "team.json");
  CHECK(err.path == "/group/members/0/supervisor/restart");
  CHECK(failure(R"({"group": {"id": "g", "members": [)" + task("a") +
                R"(], "extra": 1}, "more": 2})")
          .path == "/more");
  CHECK(failure(R"({"group": {"id": "g", "members": [{"group": {"id": "s",
                  "members": [)" +
                task("a") + R"(]}, "significant": true}]}})")
          .path == "/group/members/0/significant");
}

TEST_CASE("group file: nesting deeper than 16 levels is refused") {
  std::string doc = task("leaf");
  for (int i = 17; i >= 1; --i)
    doc = R"({"group": {"id": "g)" + std::to_string(i) + R"(", "members": [)" +
          doc + "]}}";
  auto err = failure(doc);
  CHECK(err.what.find("16 levels") != std::string::npos);
}

TEST_CASE("workflow file: steps become a group of strategy steps, each "
          "step's task named by the workflow and the step") {
  auto task_of = [](const std::string& extra = "") {
    return R"({"prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]})" +
           extra + "}";
  };
  auto g = parse(R"({"id": "fix-login", "steps": [
    {"id": "plan", "task": )" +
                 task_of() + R"(},
    {"id": "code", "depends_on": ["plan"], "task": )" +
                 task_of() + R"(},
    {"id": "review", "depends_on": ["code", "plan"], "continue_on_failure": true,
     "task": )" + task_of() +
                 "}]}");
  INFO((g ? std::string{} : g.error().to_string()));
  REQUIRE(g);
  CHECK(g->id == "fix-login");
  CHECK(g->strategy == group_strategy::steps);
  REQUIRE(g->members.size() == 3);
  CHECK(g->members[1].id == "fix-login.code");
  REQUIRE(g->members[1].task);
  CHECK(g->members[1].task->id == "fix-login.code");
  CHECK(g->members[1].restart == restart_type::temporary);
  CHECK(g->members[2].depends_on == std::vector<std::size_t>{1, 0});
  CHECK(g->members[2].continue_on_failure);
  CHECK(tree_ids(*g) == std::vector<std::string>{"fix-login", "fix-login.plan",
                                                 "fix-login.code",
                                                 "fix-login.review"});
  auto doc = parse_json_text(R"({"id": "w", "steps": []})", "w.json");
  REQUIRE(doc);
  CHECK(is_group_document(*doc));
  CHECK(is_workflow_document(*doc));
}

TEST_CASE("workflow file: bad steps are refused naming the pointer") {
  auto t = std::string{
    R"("task": {"prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]}})"};
  auto wf = [&](const std::string& steps) {
    return R"({"id": "w", "steps": [)" + steps + "]}";
  };
  SECTION("an unknown step in depends_on") {
    auto e = failure(wf(R"({"id": "a", "depends_on": ["nope"], )" + t + "}"));
    CHECK(e.path == "/steps/0/depends_on/0");
    CHECK_THAT(e.what, Catch::Contains("unknown step \"nope\""));
  }
  SECTION("a cycle") {
    auto e = failure(wf(R"({"id": "a", "depends_on": ["c"], )" + t +
                        R"(}, {"id": "b", "depends_on": ["a"], )" + t +
                        R"(}, {"id": "c", "depends_on": ["b"], )" + t + "}"));
    CHECK_THAT(e.path, Catch::StartsWith("/steps/"));
    CHECK_THAT(e.what, Catch::Contains("a cycle of dependencies"));
    CHECK_THAT(e.what, Catch::Contains("a -> c -> b -> a"));
  }
  SECTION("duplicate step ids") {
    auto e =
      failure(wf(R"({"id": "a", )" + t + R"(}, {"id": "a", )" + t + "}"));
    CHECK(e.path == "/steps/1/id");
    CHECK_THAT(e.what, Catch::Contains("/steps/0/id has it too"));
  }
  SECTION("a step that depends on itself") {
    auto e = failure(wf(R"({"id": "a", "depends_on": ["a"], )" + t + "}"));
    CHECK(e.path == "/steps/0/depends_on/0");
  }
  SECTION("a task id of its own") {
    auto e = failure(wf(
      R"({"id": "a", "task": {"id": "x", "prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]}}})"));
    CHECK(e.path == "/steps/0/task/id");
  }
  SECTION("a permanent step") {
    auto e = failure(wf(
      R"({"id": "a", "task": {"prompt": "p", "supervisor": {"restart": "permanent"}, "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]}}})"));
    CHECK(e.path == "/steps/0/task/supervisor/restart");
  }
  SECTION("a task error names its pointer in the step") {
    auto e = failure(wf(R"({"id": "a", "task": {"prompt": 3}})"));
    CHECK(e.path == "/steps/0/task/prompt");
  }
  SECTION("no steps") {
    auto e = failure(wf(""));
    CHECK(e.path == "/steps");
  }
}

TEST_CASE("workflow file: a prompt names a branch only of a step it depends "
          "on that delivers one") {
  auto task = [](const std::string& prompt, bool repo) {
    return R"("task": {"prompt": ")" + prompt +
           R"(", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}]})" +
           (repo ? R"(, "repo": {"path": "/tmp"})" : "") + "}";
  };
  auto wf = [&](const std::string& prompt, bool repo = true,
                const std::string& extra_step = "") {
    return R"({"id": "w", "steps": [{"id": "code", )" + task("c", repo) +
           R"(}, {"id": "mid", "depends_on": ["code"], )" + task("m", false) +
           R"(}, {"id": "review", "depends_on": ["mid"], )" +
           task(prompt, false) + "}" + extra_step + "]}";
  };
  SECTION("a step depended on, not directly, that delivers a branch") {
    auto g = parse(wf("see {{steps.code.branch}}"));
    INFO((g ? std::string{} : g.error().to_string()));
    CHECK(g);
  }
  SECTION("an unknown step") {
    auto e = failure(wf("see {{steps.nope.branch}}"));
    CHECK(e.path == "/steps/2/task/prompt");
    CHECK_THAT(e.what, Catch::Contains("unknown step \"nope\""));
  }
  SECTION("a step it does not depend on") {
    auto e = failure(wf("see {{steps.other.branch}}", true,
                        R"(, {"id": "other", )" + task("o", true) + "}"));
    CHECK_THAT(e.what, Catch::Contains("does not depend on"));
  }
  SECTION("an answer of a step with no answer schema") {
    auto e = failure(wf("see {{steps.code.answer.plan}}"));
    CHECK_THAT(e.what, Catch::Contains("has no answer schema"));
  }
  SECTION("an unknown field") {
    auto e = failure(wf("see {{steps.code.color}}"));
    CHECK_THAT(e.what, Catch::Contains("\"branch\""));
  }
  SECTION("a step that delivers no branch") {
    auto e = failure(wf("see {{steps.code.branch}}", false));
    CHECK_THAT(e.what, Catch::Contains("delivers none"));
  }
  SECTION("not of the form") {
    auto e = failure(wf("see {{steps.code}}"));
    CHECK_THAT(e.what, Catch::Contains("is not of the form"));
  }
}

TEST_CASE("workflow file: a best_of step is a race of copies of its task, "
          "each starting from the next agent of its chain") {
  auto agents = std::string{
    R"("agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true", "cli_flags": ""}, {"agent_id": "b", "agent_cli": "/bin/false", "cli_flags": ""}], "selection_mode": "round-robin"})"};
  auto g = parse(R"({"id": "w", "steps": [
    {"id": "code", "best_of": 3, "task": {"prompt": "p", "repo": {"path": "/tmp"}, )" +
                 agents + R"(}},
    {"id": "review", "depends_on": ["code"], "task": {"prompt": "see {{steps.code.branch}}", )" +
                 agents + "}}]}");
  INFO((g ? std::string{} : g.error().to_string()));
  REQUIRE(g);
  auto& code = g->members[0];
  CHECK(code.id == "w.code");
  CHECK_FALSE(code.task);
  REQUIRE(code.group);
  CHECK(code.group->id == "w.code");
  CHECK(code.group->strategy == group_strategy::race);
  CHECK(code.restart == restart_type::temporary);
  REQUIRE(code.group->members.size() == 3);
  std::vector<std::string> first_agents;
  for (auto& racer : code.group->members) {
    REQUIRE(racer.task);
    CHECK(racer.task->id == racer.id);
    CHECK(racer.restart == restart_type::temporary);
    REQUIRE(racer.task->selection);
    CHECK(racer.task->selection->agents.size() == 2);
    CHECK(racer.task->selection->mode == selection_mode::fallback);
    first_agents.push_back(racer.task->selection->agents.front().agent_id);
  }
  CHECK(first_agents == std::vector<std::string>{"a", "b", "a"});
  CHECK(code.group->members[2].id == "w.code.3");
  CHECK(step_task(code) == &*code.group->members[0].task);
  CHECK(tree_ids(*g) == std::vector<std::string>{"w", "w.code", "w.code.1",
                                                 "w.code.2", "w.code.3",
                                                 "w.review"});
  // best_of 1 is a plain step.
  auto one = parse(
    R"({"id": "w", "steps": [{"id": "a", "best_of": 1, "task": {"prompt": "p"}}]})");
  REQUIRE(one);
  CHECK(one->members[0].task);
  CHECK_FALSE(one->members[0].group);
}

TEST_CASE("workflow file: best_of out of range, or a step id its racers "
          "take, is refused naming the pointer") {
  auto wf = [](const std::string& steps) {
    return R"({"id": "w", "steps": [)" + steps + "]}";
  };
  auto step = [](const std::string& id, const std::string& extra = "") {
    return R"({"id": ")" + id + R"(", )" + extra +
           R"("task": {"prompt": "p"}})";
  };
  for (auto n : {"0", "9", "-1", "2.5", "\"3\""}) {
    INFO(n);
    auto e = failure(wf(step("a", std::string{R"("best_of": )"} + n + ", ")));
    CHECK(e.path == "/steps/0/best_of");
  }
  auto e = failure(wf(step("a", R"("best_of": 9, )")));
  CHECK_THAT(e.what, Catch::Contains("8"));
  auto taken =
    failure(wf(step("code", R"("best_of": 2, )") + ", " + step("code.2")));
  CHECK(taken.path == "/steps/1/id");
  CHECK_THAT(taken.what, Catch::Contains("\"w.code.1\" to \"w.code.2\""));
  CHECK(parse(wf(step("code", R"("best_of": 2, )") + ", " + step("code.3"))));
  auto long_id = std::string(61, 'x');
  auto too_long = failure(wf(step(long_id, R"("best_of": 2, )")));
  CHECK(too_long.path == "/steps/0/id");
}

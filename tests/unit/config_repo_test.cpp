// The task keys of repository tasks and attempt steps (issue 13): how they
// are read, their defaults, and errors naming the file and the field.

#include "tasksup/supervisor/config.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace tasksup;

namespace {

expected<task_spec> task(std::string_view text) {
  auto doc = parse_json_text(text, "t.json");
  REQUIRE(doc.has_value());
  return parse_task(*doc, "t.json", builtin_config());
}

void check_error(std::string_view text, const std::string& path,
                 const std::string& what_part) {
  auto res = task(text);
  INFO(text);
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == "t.json");
  CHECK(res.error().path == path);
  INFO(res.error().what);
  CHECK(res.error().what.find(what_part) != std::string::npos);
}

} // namespace

TEST_CASE("repo keys: defaults and every command form", "[config][repo]") {
  auto t = task(R"({"prompt": "p", "repo": {"path": "/src/app"},
    "gates": ["npm test -- --ci", ["make", "lint"],
              {"name": "types", "command": "tsc --noEmit", "timeout_s": 30}],
    "gate_timeout_s": 120,
    "preflight": "check-quota 'team a'"})");
  REQUIRE(t.has_value());
  REQUIRE(t->repo);
  CHECK(t->repo->path == "/src/app");
  CHECK(t->repo->base == "HEAD");
  CHECK(t->deliver == delivery_mode::branch);
  CHECK_FALSE(t->keep_failed);
  // Feedback is on for repository tasks unless turned off.
  CHECK(t->feedback.enabled);
  CHECK(t->feedback.lines == 40);
  REQUIRE(t->gates.size() == 3);
  CHECK(t->gates[0].argv ==
        std::vector<std::string>{"npm", "test", "--", "--ci"});
  CHECK(t->gates[0].name == "npm");
  CHECK(t->gates[0].timeout_s == 120);
  CHECK(t->gates[1].argv == std::vector<std::string>{"make", "lint"});
  CHECK(t->gates[2].name == "types");
  CHECK(t->gates[2].timeout_s == 30);
  REQUIRE(t->preflight);
  CHECK(t->preflight->argv ==
        std::vector<std::string>{"check-quota", "team a"});
  // The machine learns which steps the task has.
  CHECK(t->settings.steps.gates);
  CHECK(t->settings.steps.preflight);
  CHECK(t->settings.steps.deliver);
}

TEST_CASE("repo keys: a task without them has no steps and no feedback",
          "[config][repo]") {
  auto t = task(R"({"prompt": "p"})");
  REQUIRE(t.has_value());
  CHECK_FALSE(t->repo);
  CHECK_FALSE(t->feedback.enabled);
  CHECK_FALSE(t->settings.steps.gates);
  CHECK_FALSE(t->settings.steps.preflight);
  CHECK_FALSE(t->settings.steps.deliver);
  CHECK_FALSE(t->settings.attempt_timeout_s);
  CHECK_FALSE(t->settings.done_exit_code);
}

TEST_CASE("repo keys: feedback forms, delivery and supervisor keys",
          "[config][repo]") {
  auto t = task(R"({"prompt": "p", "repo": "/r", "deliver": "patch",
    "keep_failed": true, "feedback": "Try again: {reason}",
    "supervisor": {"attempt_timeout_s": 900, "done_exit_code": 99,
                   "restart_backoff": {"kind": "table", "table_s": [2, 10]},
                   "actions": {"gate_failed": "fallback"}}})");
  REQUIRE(t.has_value());
  CHECK(t->repo->path == "/r");
  CHECK(t->deliver == delivery_mode::patch);
  CHECK(t->keep_failed);
  CHECK(t->feedback.enabled);
  CHECK(t->feedback.template_text == "Try again: {reason}");
  CHECK(t->settings.attempt_timeout_s == 900);
  CHECK(t->settings.done_exit_code == 99);
  CHECK(t->settings.restart_backoff.table_s == std::vector<double>{2, 10});
  CHECK(t->settings.actions.at(error_class::gate_failed) == action::fallback);
  auto off = task(R"({"prompt": "p", "repo": "/r", "feedback": false})");
  REQUIRE(off.has_value());
  CHECK_FALSE(off->feedback.enabled);
  auto obj = task(R"({"prompt": "p", "repo": "/r",
    "feedback": {"lines": 5, "template": "x"}})");
  REQUIRE(obj.has_value());
  CHECK(obj->feedback.enabled);
  CHECK(obj->feedback.lines == 5);
}

TEST_CASE("repo keys: errors name the field", "[config][repo]") {
  check_error(R"({"prompt": "p", "gates": ["make"]})", "/gates",
              "needs a repository task");
  check_error(R"({"prompt": "p", "repo": "relative/path"})", "/repo",
              "absolute path");
  check_error(R"({"prompt": "p", "repo": {"path": "/r", "base": "--all"}})",
              "/repo/base", "branch, tag or commit");
  check_error(R"({"prompt": "p", "repo": {"path": "/r", "bsae": "x"}})",
              "/repo/bsae", "unknown key \"bsae\"");
  check_error(R"({"prompt": "p", "repo": "/r", "gates": ["make 'x"]})",
              "/gates/0", "quote");
  check_error(R"({"prompt": "p", "repo": "/r", "gates": [""]})", "/gates/0",
              "non-empty command");
  check_error(R"({"prompt": "p", "repo": "/r", "gates": [{"command": "x",
              "timeout_s": 0}]})",
              "/gates/0/timeout_s", "");
  check_error(R"({"prompt": "p", "repo": "/r", "deliver": "push"})", "/deliver",
              "\"branch\", \"apply\", \"patch\"");
  check_error(R"({"prompt": "p", "repo": "/r", "workdir": "/w"})", "/workdir",
              "cannot be set with");
  check_error(R"({"prompt": "p", "preflight": 42})", "/preflight",
              "expected a command");
  check_error(R"({"prompt": "p", "supervisor": {"done_exit_code": 0}})",
              "/supervisor/done_exit_code", "");
  check_error(R"({"prompt": "p", "supervisor": {"attempt_timeout_s": 0}})",
              "/supervisor/attempt_timeout_s", "");
  check_error(R"({"prompt": "p", "supervisor": {"restart_backoff":
              {"kind": "table", "table_s": []}}})",
              "/supervisor/restart_backoff", "non-empty");
}

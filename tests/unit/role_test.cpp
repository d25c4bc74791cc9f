#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/group_spec.hpp"
#include "tasksup/supervisor/role.hpp"

#include "../temp_dir.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using namespace tasksup;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream out{file};
  out << text;
}

/// A config directory holding `roles` (name -> JSON).
struct config_dir {
  tasksup::test::temp_dir dir{"roles"};

  void role(const std::string& name, const std::string& json) {
    write(fs::path{dir.path} / "roles" / (name + ".json"), json);
  }

  expected<config_set> load() const { return load_config_dir(dir.path); }
};

expected<task_spec> task_of(const config_set& cfg, const std::string& json) {
  return parse_task(boost::json::parse(json), "t.json", cfg);
}

std::string error_of(const expected<task_spec>& t) {
  REQUIRE_FALSE(t);
  return t.error().to_string();
}

} // namespace

TEST_CASE("roles: the shipped planner, implementer and reviewer load",
          "[role]") {
  auto cfg = load_config_dir(TASKSUP_SOURCE_DIR "/config");
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg);
  for (auto name : {"planner", "implementer", "reviewer"}) {
    INFO(name);
    REQUIRE(cfg->roles.count(name) == 1);
    auto& role = cfg->roles.at(name);
    CHECK_FALSE(role.prompt_template.empty());
    CHECK(answer_schema::compile_text(role.answer_schema));
  }
  CHECK(cfg->roles.at("implementer").gates.has_value());
  auto task = task_of(*cfg, R"({"prompt": "Fix the login bug",
                               "role": "planner"})");
  REQUIRE(task);
  CHECK(task->role == "planner");
  CHECK(task->prompt.find("Fix the login bug") != std::string::npos);
  CHECK(task->prompt.find("{{") == std::string::npos);
  CHECK(task->answer_schema == cfg->roles.at("planner").answer_schema);
  CHECK(task->settings.steps.answer);
  // Feedback comes on with a checked answer.
  CHECK(task->feedback.enabled);
}

TEST_CASE("roles: an overlay replaces the keys it names, several levels deep",
          "[role]") {
  config_dir c;
  c.role("base", R"({"description": "base",
    "prompt_template": "BASE {{prompt}}",
    "answer_schema": {"type": "object", "properties": {"a": {}}}})");
  c.role("mid", R"({"base_role": "base", "description": "mid"})");
  c.role("top", R"({"base_role": "mid",
    "prompt_template": "TOP {{prompt}} / {{context}}"})");
  auto cfg = c.load();
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg);
  auto& top = cfg->roles.at("top");
  CHECK(top.prompt_template == "TOP {{prompt}} / {{context}}");
  CHECK(top.description == "mid");
  CHECK(top.answer_schema == R"({"type":"object","properties":{"a":{}}})");
  CHECK(top.base_role == "mid");
  auto task = task_of(*cfg, R"({"prompt": "p", "role": "top",
                               "extra_context": "ctx"})");
  REQUIRE(task);
  CHECK(task->prompt == "TOP p / === extra context ===\nctx\n");
}

TEST_CASE("roles: a cycle, an unknown base and a chain too deep are refused",
          "[role]") {
  SECTION("cycle") {
    config_dir c;
    c.role("a", R"({"base_role": "b"})");
    c.role("b", R"({"base_role": "c"})");
    c.role("c", R"({"base_role": "a"})");
    auto cfg = c.load();
    REQUIRE_FALSE(cfg);
    CHECK(cfg.error().path == "/base_role");
    CHECK(cfg.error().what == "the roles form a cycle: a -> b -> c -> a");
  }
  SECTION("unknown base") {
    config_dir c;
    c.role("a", R"({"base_role": "nobody"})");
    auto cfg = c.load();
    REQUIRE_FALSE(cfg);
    CHECK(cfg.error().where.find("a.json") != std::string::npos);
    CHECK(cfg.error().what.find("unknown role \"nobody\"") !=
          std::string::npos);
  }
  SECTION("too deep") {
    config_dir c;
    for (int i = 0; i < 9; ++i)
      c.role("r" + std::to_string(i),
             R"({"base_role": "r)" + std::to_string(i + 1) + R"("})");
    c.role("r9", "{}");
    auto cfg = c.load();
    REQUIRE_FALSE(cfg);
    CHECK(cfg.error().what.find("roles deep") != std::string::npos);
  }
}

TEST_CASE("roles: a template names only known names, and no code runs",
          "[role]") {
  config_dir c;
  c.role("bad", R"({"prompt_template": "{{prompt}} {{env.HOME}}"})");
  auto cfg = c.load();
  REQUIRE_FALSE(cfg);
  CHECK(cfg.error().path == "/prompt_template");
  CHECK(cfg.error().what.find("unknown template name \"env.HOME\"") !=
        std::string::npos);
  // A task's own text is put in as it is, never read as a template.
  config_dir ok;
  ok.role("r", R"({"prompt_template": "[{{prompt}}]"})");
  auto good = ok.load();
  REQUIRE(good);
  auto task = task_of(*good, R"x({"prompt": "{{context}} $(rm -rf /)",
                               "role": "r"})x");
  REQUIRE(task);
  CHECK(task->prompt == "[{{context}} $(rm -rf /)]");
}

TEST_CASE("roles: a role's schema must be valid JSON Schema, by pointer",
          "[role]") {
  config_dir c;
  c.role("r", R"({"answer_schema": {"properties": {"a": {"pattern": "(x"}}}})");
  auto cfg = c.load();
  REQUIRE_FALSE(cfg);
  CHECK(cfg.error().path == "/answer_schema/properties/a/pattern");
}

TEST_CASE("roles: a task naming an unknown role is refused", "[role]") {
  auto cfg = load_config_dir(TASKSUP_SOURCE_DIR "/config");
  REQUIRE(cfg);
  auto e = error_of(task_of(*cfg, R"({"prompt": "p", "role": "poet"})"));
  CHECK(e.find("/role") != std::string::npos);
  CHECK(e.find("unknown role \"poet\"") != std::string::npos);
  CHECK(e.find("\"planner\"") != std::string::npos);
}

TEST_CASE("context packing: target files of the repository and extra "
          "context, cut with a visible note",
          "[role]") {
  tasksup::test::temp_dir repo{"ctx"};
  write(fs::path{repo.path} / "src" / "a.c", "int a;\n");
  write(fs::path{repo.path} / "big.txt", std::string(5000, 'x'));
  auto cfg = builtin_config();
  auto doc = [&](const std::string& files, int cap) {
    return R"({"prompt": "p", "repo": ")" + repo.path +
           R"(", "target_files": )" + files + R"(, "context_max_bytes": )" +
           std::to_string(cap) + "}";
  };
  auto t = task_of(cfg, doc(R"(["src/a.c", "big.txt"])", 1000));
  INFO((t ? "" : t.error().to_string()));
  REQUIRE(t);
  CHECK(t->prompt.rfind("p\n\n=== src/a.c ===\nint a;\n=== big.txt ===\n", 0) ==
        0);
  CHECK(t->prompt.find("[tasksup: big.txt cut to ") != std::string::npos);
  CHECK(t->prompt.find(" of 5000 bytes: the context is limited to 1000 bytes "
                       "(context_max_bytes)]") != std::string::npos);
  // Outside the repository, missing, or relative without one: refused.
  CHECK(error_of(task_of(cfg, doc(R"(["../etc/passwd"])", 1000)))
          .find("outside the repository") != std::string::npos);
  CHECK(error_of(task_of(cfg, doc(R"(["nope.c"])", 1000)))
          .find("/target_files/0") != std::string::npos);
  CHECK(error_of(task_of(cfg, R"({"prompt": "p", "target_files": ["a.c"]})"))
          .find("needs a repository task") != std::string::npos);
}

TEST_CASE("answer_schema: a task's own schema is checked when it is read",
          "[role]") {
  auto cfg = builtin_config();
  auto e = error_of(task_of(cfg, R"({"prompt": "p",
    "answer_schema": {"type": "object", "properties": {"n": {"minimum": "x"}}}})"));
  CHECK(e.find("/answer_schema") != std::string::npos);
  auto ok =
    task_of(cfg, R"({"prompt": "p", "answer_schema": {"type": "array"}})");
  REQUIRE(ok);
  CHECK(ok->answer_schema == R"({"type":"array"})");
  CHECK(ok->settings.steps.answer);
  CHECK(ok->feedback.enabled);
  auto off = task_of(cfg, R"({"prompt": "p", "feedback": false,
                             "answer_schema": true})");
  REQUIRE(off);
  CHECK_FALSE(off->feedback.enabled);
}

TEST_CASE("workflow: a template names a field of a step's answer schema",
          "[role]") {
  auto cfg = builtin_config();
  auto wf = [&](const std::string& field, bool schema) {
    auto plan = std::string{R"({"id": "plan", "task": {"prompt": "plan")"} +
                (schema ? R"(, "answer_schema": {"type": "object",
                   "properties": {"summary": {"type": "string"}}}})"
                        : "}") +
                "}";
    return parse_group(
      boost::json::parse(R"({"id": "wf", "steps": [)" + plan +
                         R"(, {"id": "code", "depends_on": ["plan"],
         "task": {"prompt": "do {{steps.plan.answer.)" +
                         field + R"(}}"}}]})"),
      "wf.json", cfg);
  };
  CHECK(wf("summary", true));
  auto unknown = wf("nope", true);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().path == "/steps/1/task/prompt");
  CHECK(unknown.error().what.find("does not list") != std::string::npos);
  auto none = wf("summary", false);
  REQUIRE_FALSE(none);
  CHECK(none.error().what.find("no answer schema") != std::string::npos);
}

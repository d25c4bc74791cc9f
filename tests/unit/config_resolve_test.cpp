// The one way in: a task file, a JSON submit and a typed submit of the same
// task resolve to the same task_spec and get the same verdict.

#include "tasksup/supervisor/config.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace tasksup;
namespace json = boost::json;

namespace {

json::value doc(std::string_view text) {
  auto res = parse_json_text(text, "test.json");
  INFO(text);
  REQUIRE(res.has_value());
  return *res;
}

/// Global settings, a `team` environment that overrides some of them and
/// brings agents and rules, and a `default` environment.
config_set node_config_set() {
  auto cfg = builtin_config();
  cfg.supervisor.max_retries_per_agent = 5;
  cfg.supervisor.stop_grace_s = 4;
  auto team = parse_environment(doc(R"({
    "agents": [{"agent_id": "e1", "agent_cli": "codex"},
               {"agent_id": "e2", "agent_cli": "claude"}],
    "agent_fallbacks": {"e1": "e2"},
    "selection_mode": "round-robin",
    "supervisor": {"max_total_attempts": 7, "backoff_base_seconds": 1,
                   "actions": {"fatal": "fallback"}, "deadline_s": 600},
    "classifier": {"rules": [{"id": "env-rule", "class": "fatal",
                              "exit_codes": [3]}]}
  })"),
                                "team.json", "team");
  REQUIRE(team.has_value());
  cfg.environments.emplace("team", std::move(*team));
  auto def = parse_environment(
    doc(R"({"agents": [{"agent_id": "d", "agent_cli": "gemini"}],
            "supervisor": {"max_crash_restarts": 3}})"),
    "default.json", "default");
  REQUIRE(def.has_value());
  cfg.environments.emplace("default", std::move(*def));
  return cfg;
}

void check_same(const task_spec& a, const task_spec& b) {
  CHECK(a.id == b.id);
  CHECK(a.prompt == b.prompt);
  CHECK(a.environment == b.environment);
  REQUIRE(a.selection.has_value() == b.selection.has_value());
  if (a.selection) {
    CHECK(a.selection->agents == b.selection->agents);
    CHECK(a.selection->agent_fallbacks == b.selection->agent_fallbacks);
    CHECK(a.selection->mode == b.selection->mode);
  }
  CHECK(same_overrides(a.supervisor, b.supervisor));
  CHECK(same_settings(a.settings, b.settings));
  REQUIRE(a.classifier_rules.has_value() == b.classifier_rules.has_value());
  if (a.classifier_rules) {
    REQUIRE(a.classifier_rules->size() == b.classifier_rules->size());
    for (std::size_t i = 0; i < a.classifier_rules->size(); ++i) {
      const auto& x = a.classifier_rules->at(i);
      const auto& y = b.classifier_rules->at(i);
      CHECK(x.id == y.id);
      CHECK(x.cls == y.cls);
      CHECK(x.exit_codes == y.exit_codes);
      CHECK(x.patterns == y.patterns);
    }
  }
  CHECK(a.runtime == b.runtime);
  CHECK(a.image == b.image);
  CHECK(a.env == b.env);
  REQUIRE(a.mounts.size() == b.mounts.size());
  for (std::size_t i = 0; i < a.mounts.size(); ++i) {
    CHECK(a.mounts[i].host_path == b.mounts[i].host_path);
    CHECK(a.mounts[i].container_path == b.mounts[i].container_path);
    CHECK(a.mounts[i].read_only == b.mounts[i].read_only);
  }
  CHECK(a.workdir == b.workdir);
  CHECK(a.memory_limit_mb == b.memory_limit_mb);
}

/// The JSON submit path: parse as written, then the one way in.
expected<task_spec> from_json(std::string_view text, const config_set& cfg) {
  auto written = parse_task_as_written(doc(text), "submitted task");
  if (!written)
    return written;
  return resolve_task(std::move(*written), cfg, "submitted task");
}

} // namespace

TEST_CASE("resolve_task: a typed and a JSON submit of the same task resolve "
          "alike") {
  auto cfg = node_config_set();
  SECTION("a task of an environment, overriding some settings") {
    auto json_task = from_json(R"({"id": "t1", "prompt": "fix it",
      "environment": "team",
      "supervisor": {"backoff_base_seconds": 2, "actions": {"retryable": "fail"},
                     "backoff": {"rate_limit": {"kind": "exponential",
                                                "initial_s": 1, "max_s": 8}}},
      "runtime": "docker", "image": "busybox", "env": {"A": "1"},
      "mounts": [{"host_path": "/src", "container_path": "/w",
                  "read_only": true}],
      "workdir": "/w", "memory_limit_mb": 512})",
                               cfg);
    if (!json_task)
      FAIL(json_task.error().to_string());
    task_spec typed;
    typed.id = "t1";
    typed.prompt = "fix it";
    typed.environment = "team";
    typed.supervisor.backoff_base_seconds = 2;
    typed.supervisor.actions[error_class::retryable] = action::fail;
    backoff_spec exp;
    exp.kind = backoff_spec::kind_t::exponential;
    exp.initial_s = 1;
    exp.max_s = 8;
    typed.supervisor.backoff[error_class::rate_limit] = exp;
    typed.runtime = "docker";
    typed.image = "busybox";
    typed.env["A"] = "1";
    typed.mounts.push_back(mount_spec{"/src", "/w", true});
    typed.workdir = "/w";
    typed.memory_limit_mb = 512;
    auto typed_task = resolve_task(typed, cfg, "submitted task");
    REQUIRE(typed_task.has_value());
    check_same(*json_task, *typed_task);
    // global < environment < task, field by field.
    const auto& s = typed_task->settings;
    CHECK(s.max_retries_per_agent == 5);  // global
    CHECK(s.stop_grace_s == 4.0);         // global
    CHECK(s.max_total_attempts == 7);     // environment
    CHECK(s.deadline_s == 600.0);         // environment
    CHECK(s.backoff_base_seconds == 2.0); // task over environment
    CHECK(s.actions.at(error_class::fatal) == action::fallback); // env
    CHECK(s.actions.at(error_class::retryable) == action::fail); // task
    CHECK(s.backoff.at(error_class::rate_limit).max_s == 8.0);
    // The environment's agents and rules, as the task has none.
    REQUIRE(typed_task->selection.has_value());
    CHECK(typed_task->selection->agents.at(0).agent_id == "e1");
    CHECK(typed_task->selection->mode == selection_mode::round_robin);
    REQUIRE(typed_task->classifier_rules.has_value());
    CHECK(typed_task->classifier_rules->at(0).id == "env-rule");
  }
  SECTION("a task naming no environment gets the default one") {
    auto json_task = from_json(R"({"prompt": "p"})", cfg);
    REQUIRE(json_task.has_value());
    task_spec typed;
    typed.prompt = "p";
    auto typed_task = resolve_task(typed, cfg, "submitted task");
    REQUIRE(typed_task.has_value());
    check_same(*json_task, *typed_task);
    CHECK(typed_task->environment == "default");
    CHECK(typed_task->settings.max_crash_restarts == 3);
    CHECK(typed_task->selection->agents.at(0).agent_id == "d");
  }
  SECTION("a task's own agents and rules replace the environment's") {
    auto json_task = from_json(R"({"prompt": "p", "environment": "team",
      "agent_selection": {"agents": [{"agent_id": "mine",
                                      "agent_cli": "/bin/x",
                                      "cli_flags": "-a 'b c'"}]},
      "classifier": {"rules": [{"id": "own", "class": "fatal",
                                "patterns": ["boom"]}]}})",
                               cfg);
    REQUIRE(json_task.has_value());
    task_spec typed;
    typed.prompt = "p";
    typed.environment = "team";
    agent_spec mine;
    mine.agent_id = "mine";
    mine.agent_cli = "/bin/x";
    mine.cli_flags = "-a 'b c'";
    mine.args = {"-a", "b c"};
    typed.selection = agent_selection{{mine}, {}, selection_mode::fallback};
    classifier_rule own;
    own.id = "own";
    own.cls = error_class::fatal;
    own.patterns = {"boom"};
    typed.classifier_rules = std::vector<classifier_rule>{own};
    auto typed_task = resolve_task(typed, cfg, "submitted task");
    REQUIRE(typed_task.has_value());
    check_same(*json_task, *typed_task);
    CHECK(typed_task->selection->agents.size() == 1);
  }
}

TEST_CASE("resolve_task: a task sets values back to the built-in defaults "
          "and clears optional ones over its environment's") {
  auto cfg = node_config_set();
  // team: max_total_attempts 7, backoff_base_seconds 1, fatal -> fallback,
  // deadline_s 600; the node: max_retries_per_agent 5.
  auto json_task = from_json(R"({"prompt": "p", "environment": "team",
    "supervisor": {"max_total_attempts": 30, "backoff_base_seconds": 5,
                   "max_retries_per_agent": 3, "actions": {"fatal": "fail"},
                   "deadline_s": null}})",
                             cfg);
  if (!json_task)
    FAIL(json_task.error().to_string());
  task_spec typed;
  typed.prompt = "p";
  typed.environment = "team";
  typed.supervisor.max_total_attempts = 30;
  typed.supervisor.backoff_base_seconds = 5.0;
  typed.supervisor.max_retries_per_agent = 3;
  typed.supervisor.actions[error_class::fatal] = action::fail;
  typed.supervisor.deadline_s.emplace(); // cleared: no deadline
  auto typed_task = resolve_task(typed, cfg, "submitted task");
  REQUIRE(typed_task.has_value());
  check_same(*json_task, *typed_task);
  const supervisor_config builtin;
  const auto& s = typed_task->settings;
  CHECK(s.max_total_attempts == builtin.max_total_attempts);
  CHECK(s.backoff_base_seconds == builtin.backoff_base_seconds);
  CHECK(s.max_retries_per_agent == builtin.max_retries_per_agent);
  CHECK(s.actions.at(error_class::fatal) == action::fail);
  CHECK_FALSE(s.deadline_s.has_value());
  // What the task does not name stays the environment's and the node's.
  CHECK(s.stop_grace_s == 4.0);
  // The task keeps what it said, so resolving it again means the same.
  REQUIRE(typed_task->supervisor.deadline_s.has_value());
  CHECK_FALSE(typed_task->supervisor.deadline_s->has_value());
  auto again = resolve_task(*typed_task, cfg, "again");
  REQUIRE(again.has_value());
  CHECK(same_settings(again->settings, s));
}

TEST_CASE("resolve_task: null clears each optional setting an environment "
          "set, and naming nothing keeps it") {
  auto cfg = builtin_config();
  auto env = parse_environment(
    doc(R"({"supervisor": {"deadline_s": 600, "attempt_timeout_s": 60,
                           "done_exit_code": 9}})"),
    "ops.json", "ops");
  REQUIRE(env.has_value());
  cfg.environments.emplace("ops", std::move(*env));
  auto kept = from_json(R"({"prompt": "p", "environment": "ops"})", cfg);
  REQUIRE(kept.has_value());
  CHECK(kept->settings.deadline_s == 600.0);
  CHECK(kept->settings.attempt_timeout_s == 60.0);
  CHECK(kept->settings.done_exit_code == 9);
  auto cleared = from_json(R"({"prompt": "p", "environment": "ops",
    "supervisor": {"deadline_s": null, "attempt_timeout_s": null,
                   "done_exit_code": null}})",
                           cfg);
  REQUIRE(cleared.has_value());
  CHECK_FALSE(cleared->settings.deadline_s.has_value());
  CHECK_FALSE(cleared->settings.attempt_timeout_s.has_value());
  CHECK_FALSE(cleared->settings.done_exit_code.has_value());
  auto replaced = from_json(R"({"prompt": "p", "environment": "ops",
    "supervisor": {"deadline_s": 30}})",
                            cfg);
  REQUIRE(replaced.has_value());
  CHECK(replaced->settings.deadline_s == 30.0);
  CHECK(replaced->settings.attempt_timeout_s == 60.0);
  // A typed task says the same with `emplace()` (cleared) and a value.
  task_spec typed;
  typed.prompt = "p";
  typed.environment = "ops";
  typed.supervisor.deadline_s.emplace();
  typed.supervisor.attempt_timeout_s.emplace();
  typed.supervisor.done_exit_code.emplace();
  auto typed_task = resolve_task(typed, cfg, "submitted task");
  REQUIRE(typed_task.has_value());
  check_same(*cleared, *typed_task);
}

TEST_CASE("resolve_task: a supervisor spawned from an unresolved task runs "
          "under the built-in defaults with the task's settings over them") {
  task_spec t;
  t.prompt = "p";
  t.supervisor.max_retries_per_agent = 1;
  t.supervisor.deadline_s = 30.0;
  auto s = effective_settings(t);
  CHECK(s.max_retries_per_agent == 1);
  CHECK(s.deadline_s == 30.0);
  CHECK(s.max_total_attempts == supervisor_config{}.max_total_attempts);
  // A resolved task runs under exactly its resolved settings.
  auto resolved = resolve_task(t, node_config_set(), "t");
  REQUIRE(resolved.has_value());
  CHECK(same_settings(effective_settings(*resolved), resolved->settings));
  CHECK(resolved->settings.stop_grace_s == 4.0); // the node's
}

TEST_CASE("resolve_task: resolving a resolved task changes nothing") {
  auto cfg = node_config_set();
  auto once = from_json(R"({"prompt": "p", "environment": "team",
    "supervisor": {"max_total_attempts": 9}})",
                        cfg);
  REQUIRE(once.has_value());
  auto twice = resolve_task(*once, cfg, "again");
  REQUIRE(twice.has_value());
  check_same(*once, *twice);
}

TEST_CASE("resolve_task: typed and JSON tasks get the same verdicts") {
  auto cfg = node_config_set();
  struct bad_case {
    const char* name;
    std::string json;
    std::function<void(task_spec&)> typed;
    const char* path;
  };
  std::string huge_prompt(max_prompt_bytes + 1, 'x');
  std::vector<bad_case> cases{
    {"NUL in the prompt", R"({"prompt": "a\u0000b"})",
     [](task_spec& t) {
       t.prompt = std::string{"a\0b", 3};
     },
     "/prompt"},
    {"a prompt too long for one argument",
     R"({"prompt": ")" + huge_prompt + R"("})",
     [&](task_spec& t) { t.prompt = huge_prompt; }, "/prompt"},
    {"an id that is a path", R"({"prompt": "p", "id": "../../etc"})",
     [](task_spec& t) { t.id = "../../etc"; }, "/id"},
    {"an unknown environment", R"({"prompt": "p", "environment": "nope"})",
     [](task_spec& t) { t.environment = "nope"; }, "/environment"},
    {"an unknown runtime", R"({"prompt": "p", "runtime": "lxc"})",
     [](task_spec& t) { t.runtime = "lxc"; }, "/runtime"},
    {"NUL in an env value", R"({"prompt": "p", "env": {"A": "x\u0000"}})",
     [](task_spec& t) {
       t.env["A"] = std::string{"x\0", 2};
     },
     "/env/A"},
    {"'=' in an env name", R"({"prompt": "p", "env": {"A=B": "x"}})",
     [](task_spec& t) { t.env["A=B"] = "x"; }, "/env/A=B"},
    {"an env entry too long for one variable",
     R"({"prompt": "p", "env": {"BIG": ")" +
       std::string(max_argument_bytes, 'y') + R"("}})",
     [](task_spec& t) { t.env["BIG"] = std::string(max_argument_bytes, 'y'); },
     "/env/BIG"},
    {"a grace that would overflow",
     R"({"prompt": "p", "supervisor": {"stop_grace_s": 1e300}})",
     [](task_spec& t) { t.supervisor.stop_grace_s = 1e300; },
     "/supervisor/stop_grace_s"},
    {"a zero deadline", R"({"prompt": "p", "supervisor": {"deadline_s": 0}})",
     [](task_spec& t) { t.supervisor.deadline_s = 0.0; },
     "/supervisor/deadline_s"},
    {"no attempts at all",
     R"({"prompt": "p", "supervisor": {"max_total_attempts": 0}})",
     [](task_spec& t) { t.supervisor.max_total_attempts = 0; },
     "/supervisor/max_total_attempts"},
    {"a negative intensity period",
     R"({"prompt": "p", "supervisor": {"intensity": {"period_s": -1}}})",
     [](task_spec& t) { t.supervisor.intensity.period_s = -1.0; },
     "/supervisor/intensity/period_s"},
    {"a done exit code out of range",
     R"({"prompt": "p", "supervisor": {"done_exit_code": 256}})",
     [](task_spec& t) { t.supervisor.done_exit_code = 256; },
     "/supervisor/done_exit_code"},
    {"duplicate agent ids", R"({"prompt": "p", "agent_selection": {"agents": [
       {"agent_id": "a", "agent_cli": "x"},
       {"agent_id": "a", "agent_cli": "y"}]}})",
     [](task_spec& t) {
       agent_spec a;
       a.agent_id = "a";
       a.agent_cli = "x";
       auto b = a;
       b.agent_cli = "y";
       t.selection = agent_selection{{a, b}, {}, selection_mode::fallback};
     },
     "/agent_selection/agents/1/agent_id"},
    {"a docker task without an image",
     R"({"prompt": "p", "runtime": "docker"})",
     [](task_spec& t) { t.runtime = "docker"; }, "/image"},
    {"a relative mount", R"({"prompt": "p", "mounts": [
       {"host_path": "rel", "container_path": "/w"}]})",
     [](task_spec& t) {
       t.mounts.push_back(mount_spec{"rel", "/w", false});
     },
     "/mounts/0/host_path"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto from_text = from_json(c.json, cfg);
    // parse_task (task files, `validate`, `run`) says the same.
    auto from_file = parse_task(doc(c.json), "submitted task", cfg);
    task_spec t;
    t.prompt = "p";
    c.typed(t);
    auto typed = resolve_task(t, cfg, "submitted task");
    REQUIRE_FALSE(from_text.has_value());
    REQUIRE_FALSE(from_file.has_value());
    REQUIRE_FALSE(typed.has_value());
    CHECK(from_text.error().path == c.path);
    CHECK(typed.error().path == c.path);
    CHECK(from_file.error().path == c.path);
    CHECK(typed.error().what == from_text.error().what);
    CHECK(from_file.error().what == from_text.error().what);
  }
}

TEST_CASE("resolve_task: a task left to a docker node default needs an image, "
          "named by the file and the field") {
  auto cfg = node_config_set();
  cfg.node.default_runtime = "docker";
  auto bare = parse_task(doc(R"({"prompt": "p"})"), "task.json", cfg);
  REQUIRE_FALSE(bare.has_value());
  CHECK(bare.error().where == "task.json");
  CHECK(bare.error().path == "/image");
  CHECK(bare.error().what.find("default_runtime") != std::string::npos);
  CHECK(
    parse_task(doc(R"({"prompt": "p", "image": "busybox"})"), "task.json", cfg)
      .has_value());
  // A task that asks for the process runtime needs none.
  CHECK(parse_task(doc(R"({"prompt": "p", "runtime": "process"})"), "task.json",
                   cfg)
          .has_value());
}

TEST_CASE("validate_task: a prompt up to the argument limit is accepted, one "
          "byte more is refused with the limit named") {
  task_spec t;
  t.prompt = std::string(max_prompt_bytes, 'x');
  CHECK(validate_task(t, "t").has_value());
  t.prompt += 'x';
  auto res = validate_task(t, "t");
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().path == "/prompt");
  CHECK_THAT(res.error().what,
             Catch::Contains(std::to_string(max_prompt_bytes + 1) +
                             " bytes; at most " +
                             std::to_string(max_prompt_bytes)));
  // TASKSUP_PROMPT=<prompt> must fit one environment string too.
  CHECK(max_prompt_bytes + sizeof("TASKSUP_PROMPT=") == 128 * 1024);
}

TEST_CASE("validate_task: the whole command line is bounded") {
  task_spec t;
  t.prompt = "p";
  for (int i = 0; i < 10; ++i)
    t.env["V" + std::to_string(i)] = std::string(120 * 1024, 'v');
  auto res = validate_task(t, "t");
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().path == "/env");
  CHECK_THAT(res.error().what, Catch::Contains("at most 1048576"));
}

TEST_CASE("validate_task: enums out of range are refused, never printed "
          "through their name tables") {
  auto refused = [](std::function<void(task_spec&)> f, const char* path) {
    task_spec t;
    t.prompt = "p";
    f(t);
    auto res = validate_task(t, "t");
    INFO(path);
    REQUIRE_FALSE(res.has_value());
    CHECK(res.error().path == path);
  };
  refused(
    [](task_spec& t) {
      t.supervisor.actions[static_cast<error_class>(20)] = action::retry;
    },
    "/supervisor/actions/20");
  refused(
    [](task_spec& t) {
      t.supervisor.actions[error_class::fatal] = static_cast<action>(7);
    },
    "/supervisor/actions/fatal");
  refused(
    [](task_spec& t) {
      t.supervisor.backoff[static_cast<error_class>(99)] = backoff_spec{};
    },
    "/supervisor/backoff/99");
  refused(
    [](task_spec& t) {
      backoff_spec b;
      b.table_s = {1};
      b.jit = static_cast<jitter>(9);
      t.supervisor.backoff[error_class::fatal] = b;
    },
    "/supervisor/backoff/fatal/jitter");
  refused(
    [](task_spec& t) {
      backoff_spec b;
      b.kind = static_cast<backoff_spec::kind_t>(5);
      t.supervisor.backoff[error_class::fatal] = b;
    },
    "/supervisor/backoff/fatal/kind");
  refused(
    [](task_spec& t) { t.supervisor.restart = static_cast<restart_type>(3); },
    "/supervisor/restart");
  refused(
    [](task_spec& t) {
      t.selection = agent_selection{};
      t.selection->mode = static_cast<selection_mode>(2);
    },
    "/agent_selection/selection_mode");
  refused(
    [](task_spec& t) {
      classifier_rule r;
      r.id = "r";
      r.cls = static_cast<error_class>(100);
      r.exit_codes = {1};
      t.classifier_rules = std::vector<classifier_rule>{r};
    },
    "/classifier/rules/0/class");
  refused([](task_spec& t) { t.prompt = "\xC3("; }, "/prompt");
}

TEST_CASE("task_warnings: a workdir shared by every attempt is named, a task "
          "without one has nothing to warn about") {
  auto cfg = node_config_set();
  auto plain = parse_task(doc(R"({"prompt": "p"})"), "task.json", cfg);
  REQUIRE(plain.has_value());
  CHECK(task_warnings(*plain).empty());
  auto shared = parse_task(doc(R"({"prompt": "p", "workdir": "/srv/w"})"),
                           "task.json", cfg);
  REQUIRE(shared.has_value());
  auto w = task_warnings(*shared);
  REQUIRE(w.size() == 1);
  CHECK(w[0].rfind("/workdir: ", 0) == 0);
  CHECK(w[0].find("\"/srv/w\"") != std::string::npos);
  CHECK(w[0].find("every attempt") != std::string::npos);
}

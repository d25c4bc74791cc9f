// `tasksup validate`, run as a real process.

#include "cli_runner.hpp"

#include <catch2/catch.hpp>

#include <string>

using tasksup::test::run_tasksup;
using tasksup::test::scratch_dir;

namespace {

const std::string repo_config = TASKSUP_SOURCE_DIR "/config";

/// Runs with no config directory from the environment, so that the source
/// tree's config/ is the default.
tasksup::test::cli_result validate(std::vector<std::string> args,
                                   std::vector<std::string> env = {}) {
  args.insert(args.begin(), "validate");
  if (env.empty())
    env.push_back("TASKSUP_CONFIG_DIR=");
  return run_tasksup(args, {}, env);
}

} // namespace

TEST_CASE("validate: the shipped config directory and examples are valid") {
  auto res =
    validate({repo_config, repo_config + "/examples/demo-recovery.json",
              repo_config + "/examples/reference-task.json"});
  INFO(res.err);
  CHECK(res.status == 0);
  CHECK(res.err.empty());
  CHECK_THAT(res.out, Catch::Contains("ok: " + repo_config +
                                      "/supervisor.json (supervisor "
                                      "settings)\n"));
  CHECK_THAT(res.out, Catch::Contains("ok: " + repo_config +
                                      "/classifier.json (classifier "
                                      "rules)\n"));
  CHECK_THAT(res.out, Catch::Contains("ok: " + repo_config +
                                      "/node.json (node settings)\n"));
  CHECK_THAT(res.out,
             Catch::Contains("ok: " + repo_config +
                             "/environments/default.json (environment)\n"));
  CHECK_THAT(res.out,
             Catch::Contains("ok: " + repo_config + " (config directory)\n"));
  CHECK_THAT(res.out, Catch::Contains("ok: " + repo_config +
                                      "/examples/reference-task.json "
                                      "(task)\n"));
}

TEST_CASE("validate: every file is checked and each error names file and "
          "path") {
  scratch_dir dir;
  auto bad =
    dir.write("bad-task.json", R"({"prompt": "p", "memory_limit_mb": -5})");
  auto syntax = dir.write("syntax.json", "{\n  \"prompt\": \"p\",\n}");
  auto good = dir.write("good-task.json", R"({"prompt": "p"})");
  auto missing = dir.path() + "/missing.json";
  auto res = validate({bad, syntax, good, missing});
  CHECK(res.status == 2);
  CHECK(res.out == "ok: " + good + " (task)\n");
  CHECK_THAT(res.err,
             Catch::Contains(bad + ": /memory_limit_mb: expected an integer "
                                   "from 1 to 16777216\n"));
  CHECK_THAT(res.err, Catch::Contains(syntax + ": invalid JSON at line 3, "
                                               "column 1: "));
  CHECK_THAT(res.err, Catch::Contains(missing + ": cannot open: "));
}

TEST_CASE("validate: a file's kind comes from its name") {
  scratch_dir dir;
  auto sup = dir.write("a/supervisor.json", R"({"max_retries_per_agent": -1})");
  auto rules = dir.write("a/classifier.json", R"({"rules": [{"id": "x",
    "class": "fatal", "patterns": ["(unclosed"]}]})");
  auto node = dir.write("a/node.json", R"({"default_runtime": "lxc"})");
  auto env = dir.write("a/environments/team.json", R"({"agents": [
    {"agent_id": "x", "agent_cli": "codex", "cli_flags": "-p 'oops"}]})");
  auto res = validate({sup, rules, node, env});
  CHECK(res.status == 2);
  CHECK(res.out.empty());
  CHECK_THAT(res.err, Catch::Contains(sup + ": /max_retries_per_agent: "
                                            "expected a non-negative "
                                            "integer\n"));
  CHECK_THAT(res.err, Catch::Contains(rules + ": /rules/0/patterns/0: "));
  CHECK_THAT(res.err, Catch::Contains(node + ": /default_runtime: expected "
                                             "one of \"process\", "
                                             "\"docker\", got \"lxc\"\n"));
  CHECK_THAT(res.err,
             Catch::Contains(env + ": /agents/0/cli_flags: agent \"x\": "
                                   "unbalanced single quote at offset 3\n"));
  // The same content under a task's name is judged as a task.
  auto as_task =
    dir.write("b/settings.json", R"({"max_retries_per_agent": 1})");
  auto task_res = validate({as_task});
  CHECK(task_res.status == 2);
  CHECK_THAT(task_res.err,
             Catch::Contains(as_task + ": /max_retries_per_agent: "
                                       "unknown key"));
}

TEST_CASE("validate: a config directory reports every bad file") {
  scratch_dir dir;
  auto sup = dir.write("supervisor.json", R"({"restart": "sometimes"})");
  dir.write("classifier.json", R"({"rules": []})");
  auto env = dir.write("environments/e.json", R"({"selection_mode": "x"})");
  dir.write("environments/ok.json", R"({})");
  auto res = validate({dir.path()});
  CHECK(res.status == 2);
  CHECK_THAT(res.err, Catch::Contains(sup + ": /restart: "));
  CHECK_THAT(res.err, Catch::Contains(env + ": /selection_mode: "));
  CHECK_THAT(res.out, Catch::Contains("ok: " + dir.path() +
                                      "/classifier.json (classifier "
                                      "rules)\n"));
  CHECK_THAT(res.out, Catch::Contains("ok: " + dir.path() +
                                      "/environments/ok.json "
                                      "(environment)\n"));
  CHECK_THAT(res.out, !Catch::Contains("(config directory)"));
}

TEST_CASE("validate: task files are checked against the config directory") {
  scratch_dir cfg;
  cfg.write("environments/team.json",
            R"({"agents": [{"agent_id": "a", "agent_cli": "codex"}]})");
  scratch_dir tasks;
  auto task =
    tasks.write("t.json", R"({"prompt": "p", "environment": "team"})");
  // Not known in the source tree's config/.
  auto plain = validate({task});
  CHECK(plain.status == 2);
  CHECK_THAT(plain.err, Catch::Contains(task + ": /environment: unknown "
                                               "environment \"team\""));
  auto with_flag = validate({"--config", cfg.path(), task});
  INFO(with_flag.err);
  CHECK(with_flag.status == 0);
  CHECK(with_flag.out == "ok: " + task + " (task)\n");
  auto with_env = validate({task}, {"TASKSUP_CONFIG_DIR=" + cfg.path()});
  CHECK(with_env.status == 0);
  // A broken config directory is reported, and the task is not passed.
  cfg.write("node.json", "{\"max_concurrent\": 0}");
  auto broken = validate({"--config", cfg.path(), task});
  CHECK(broken.status == 2);
  CHECK_THAT(broken.err, Catch::Contains(cfg.path() + "/node.json: "
                                                      "/max_concurrent: "));
  CHECK_THAT(broken.err,
             Catch::Contains(task + ": not checked: the config directory is "
                                    "invalid"));
}

TEST_CASE("validate: usage errors exit 2") {
  CHECK(validate({}).status == 2);
  CHECK(validate({"--bogus", "x.json"}).status == 2);
  auto help = validate({"--help"});
  CHECK(help.status == 0);
  CHECK_THAT(help.out, Catch::Contains("TASKSUP_CONFIG_DIR"));
}

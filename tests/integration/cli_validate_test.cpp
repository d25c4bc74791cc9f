// `tasksup validate`, run as a real process.

#include "cli_runner.hpp"
#include "tasksup_child.hpp"

#include "tasksup/supervisor/config.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

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
              repo_config + "/examples/reference-task.json",
              repo_config + "/examples/workflow-demo.json"});
  INFO(res.err);
  CHECK(res.status == 0);
  // The reference task mounts one host directory as its workdir: validate
  // says that every attempt shares it (once for the file, once as part of
  // the config directory's examples), and nothing else.
  std::istringstream err{res.err};
  std::string line;
  int warnings = 0;
  while (std::getline(err, line)) {
    CHECK(line.rfind("warning: " + repo_config +
                       "/examples/reference-task.json: /workdir: every "
                       "attempt of this task",
                     0) == 0);
    ++warnings;
  }
  CHECK(warnings == 2);
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

// -- one validator: validate, run and submit agree ---------------------------

namespace {

namespace e2e = tasksup::test;

/// A `tasksup serve` node on a free loopback port with the source tree's
/// config.
class node {
public:
  explicit node(const e2e::scratch& dir)
    : dir_(dir),
      child_(dir, "serve",
             {"serve", "--listen", "127.0.0.1:0", "--config", e2e::config_dir(),
              "--work-dir", dir / "node-work", "--state-dir", dir / "state"}) {
    auto port = e2e::listening_port(child_);
    if (!port)
      FAIL("the node did not start: " << child_.err());
    address_ = "127.0.0.1:" + std::to_string(*port);
  }

  e2e::finished submit(const std::string& file) {
    return e2e::run_to_end(dir_, {"submit", file, "--node", address_});
  }

private:
  const e2e::scratch& dir_;
  e2e::tasksup_child child_;
  std::string address_;
};

/// `validate`, `run` and `submit` of one file.
struct verdicts {
  e2e::finished validate;
  e2e::finished run;
  e2e::finished submit;
};

verdicts all_three(const e2e::scratch& dir, node& n, const std::string& file) {
  verdicts v;
  v.validate =
    e2e::run_to_end(dir, {"validate", "--config", e2e::config_dir(), file});
  v.run =
    e2e::run_to_end(dir, {"run", "--config", e2e::config_dir(), "--work-dir",
                          dir / "run-work", "--quiet", file});
  v.submit = n.submit(file);
  return v;
}

std::string sh_task(const std::string& id, const std::string& prompt_json) {
  return R"({"id": ")" + id + R"(", "prompt": )" + prompt_json +
         R"(, "agent_selection": {"agents": [{"agent_id": "sh",
            "agent_cli": "/bin/sh", "cli_flags": "-c 'exit 0'"}]}})";
}

} // namespace

TEST_CASE("one validator: validate, run and submit refuse the same tasks "
          "with the same message") {
  e2e::scratch dir;
  node n{dir};
  const std::string huge(tasksup::max_prompt_bytes + 1, 'x');
  struct bad_case {
    const char* name;
    std::string json;
    std::string message;
  };
  std::vector<bad_case> cases{
    {"NUL in the prompt", sh_task("nul", R"("a\u0000b")"),
     ": /prompt: expected a string without NUL bytes"},
    {"a prompt too long for one argument", sh_task("long", "\"" + huge + "\""),
     ": /prompt: the prompt is " + std::to_string(huge.size()) + " bytes"},
    {"a duplicate key (the bad value first)",
     R"({"id": "../../etc", "id": "x1", "prompt": "p"})",
     ": /id: duplicate key \"id\""},
    {"a duplicate key (the bad value last)",
     R"({"id": "x1", "id": "../../etc", "prompt": "p"})",
     ": /id: duplicate key \"id\""},
    {"an unknown environment", R"({"prompt": "p", "environment": "nowhere"})",
     ": /environment: unknown environment \"nowhere\""},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto file = dir.write(std::string{"bad-"} + c.name[0] + c.name[2] +
                            std::to_string(c.json.size()) + ".json",
                          c.json);
    auto v = all_three(dir, n, file);
    INFO("validate: " << v.validate.err.substr(0, 300));
    INFO("run: " << v.run.err.substr(0, 300));
    INFO("submit: " << v.submit.err.substr(0, 300));
    CHECK(v.validate.status == 2);
    CHECK(v.run.status == 2);
    CHECK(v.submit.status == 2);
    CHECK(v.validate.err.find(c.message) != std::string::npos);
    CHECK(v.run.err.find(c.message) != std::string::npos);
    CHECK(v.submit.err.find(c.message) != std::string::npos);
  }
}

TEST_CASE("one validator: a prompt at the limit passes validate, run and "
          "submit alike") {
  e2e::scratch dir;
  node n{dir};
  auto file = dir.write(
    "limit.json",
    sh_task("limit",
            "\"" + std::string(tasksup::max_prompt_bytes, 'x') + "\""));
  auto v = all_three(dir, n, file);
  INFO(v.validate.err << v.run.err << v.submit.err);
  CHECK(v.validate.status == 0);
  CHECK(v.run.status == 0); // the agent ran with the prompt as its argument
  CHECK(v.submit.status == 0);
  CHECK(v.submit.out == "limit\n");
}

TEST_CASE("one validator: a FIFO is refused at once, never read") {
  e2e::scratch dir;
  node n{dir};
  auto fifo = dir / "task.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Each would block forever in open() if it waited for a writer; run_to_end
  // gives up after 30 s and the status would be -1.
  auto v = all_three(dir, n, fifo);
  for (auto* f : {&v.validate, &v.run, &v.submit}) {
    CHECK(f->status == 2);
    CHECK(f->err.find(fifo + ": not a regular file") != std::string::npos);
  }
}

TEST_CASE("one validator: the error about a 1 MiB key is one short line") {
  e2e::scratch dir;
  auto file = dir.write("huge-key.json", R"({"prompt": "p", "env": {")" +
                                           std::string(1024 * 1024, 'k') +
                                           R"(=": "v"}})");
  auto r =
    e2e::run_to_end(dir, {"validate", "--config", e2e::config_dir(), file});
  CHECK(r.status == 2);
  CHECK(r.err.size() < 600);
  CHECK(r.err.find(file + ": /env/kkk") == 0);
}

TEST_CASE("validate: a directory's task files are checked too") {
  scratch_dir dir;
  dir.write("supervisor.json", R"({"max_retries_per_agent": 1})");
  auto good = dir.write("tasks/good.json", R"({"prompt": "p"})");
  auto bad = dir.write("tasks/bad.json", R"({"prompt": "a\u0000"})");
  auto res = validate({dir.path()});
  CHECK(res.status == 2);
  CHECK_THAT(res.out, Catch::Contains("ok: " + good + " (task)\n"));
  CHECK_THAT(res.err, Catch::Contains(bad + ": /prompt: expected a string "
                                            "without NUL bytes\n"));
  CHECK_THAT(res.out, !Catch::Contains("(config directory)"));
  // A directory of task files only is checked against --config.
  scratch_dir tasks;
  auto t = tasks.write("t.json", R"({"prompt": "p", "environment": "x"})");
  auto only = validate({tasks.path()});
  CHECK(only.status == 2);
  CHECK_THAT(only.err, Catch::Contains(t + ": /environment: unknown "
                                           "environment \"x\""));
}

TEST_CASE("validate: schedule files are checked with their tasks, alone and "
          "in a config directory, naming the file and the pointer") {
  scratch_dir dir;
  auto good = dir.write("c/schedules/nightly.json",
                        R"({"cron": "0 3 * * *", "time_zone": "Europe/Berlin",
                            "task": {"prompt": "fix the flaky tests"}})");
  auto res = validate({good});
  INFO(res.out << res.err);
  CHECK(res.status == 0);
  CHECK_THAT(res.out, Catch::Contains("ok: " + good + " (schedule)\n"));
  auto bad_cron =
    dir.write("d/schedules/bad.json",
              R"({"cron": "0 0 30 2 *", "task": {"prompt": "p"}})");
  auto bad_task = dir.write("d/schedules/typo.json",
                            R"({"every": "1h", "task": {"promt": "p"}})");
  auto bad = validate({bad_cron, bad_task});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Catch::Contains(bad_cron + ": /cron: "));
  CHECK_THAT(bad.err, Catch::Contains(bad_task + ": /task/promt: unknown key"));
  // In a config directory: checked against that directory's config.
  dir.write("e/environments/team.json",
            R"({"agents": [{"agent_id": "t", "agent_cli": "/bin/true"}]})");
  auto with_env = dir.write(
    "e/schedules/team.json",
    R"({"every": "10m", "task": {"prompt": "p", "environment": "team"}})");
  auto in_dir = validate({dir.path() + "/e"});
  INFO(in_dir.out << in_dir.err);
  CHECK(in_dir.status == 0);
  CHECK_THAT(in_dir.out, Catch::Contains("ok: " + with_env + " (schedule)\n"));
}

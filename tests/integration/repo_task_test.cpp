// Repository tasks end to end (issue 13): `tasksup run` on real git
// repositories made here, with a scripted agent that edits files
// differently per attempt and reads its feedback, gates that pass or fail,
// and every delivery mode.

#include "tasksup_child.hpp"

#include "tasksup/runtime/docker_runtime.hpp"
#include "tasksup/runtime/workspace.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace tasksup::test;
namespace rt = tasksup::runtime;

namespace {

/// Runs git in `dir` and returns its output lines; fails the test when git
/// fails.
std::vector<std::string> git(const std::string& dir,
                             std::vector<std::string> args) {
  rt::command_options o;
  o.argv = {"git", "-C", dir};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_s = 60;
  o.tail_lines = 1000;
  o.env["GIT_AUTHOR_NAME"] = "t";
  o.env["GIT_AUTHOR_EMAIL"] = "t@example.org";
  o.env["GIT_COMMITTER_NAME"] = "t";
  o.env["GIT_COMMITTER_EMAIL"] = "t@example.org";
  auto r = rt::run_command(o);
  INFO("git " << args.front() << ": " << r.last_line());
  REQUIRE(r.passed());
  return r.tail;
}

/// Whether a git command succeeds.
bool git_ok(const std::string& dir, std::vector<std::string> args) {
  rt::command_options o;
  o.argv = {"git", "-C", dir};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.timeout_s = 60;
  return rt::run_command(o).passed();
}

/// A tiny project: `check.sh` passes when answer.txt says 42.
std::string make_repo(const scratch& dir, const std::string& name = "repo") {
  auto repo = dir / name;
  std::filesystem::create_directories(repo);
  git(repo, {"init", "--quiet", "--initial-branch=main"});
  dir.write(name + "/check.sh",
            "got=$(cat answer.txt 2>/dev/null)\n"
            "echo \"checking answer.txt\"\n"
            "if [ \"$got\" != 42 ]; then\n"
            "  echo \"FAIL: expected 42 in answer.txt, got '$got'\"\n"
            "  exit 1\n"
            "fi\n"
            "echo ok\n");
  dir.write(name + "/README", "a project\n");
  git(repo, {"add", "."});
  git(repo, {"commit", "--quiet", "-m", "initial"});
  return repo;
}

/// The scripted agent: records what it saw, then edits the worktree by
/// attempt. Attempt 1 writes 41 and a stray file; later attempts write 42.
std::string make_agent(const scratch& dir, const std::string& extra = "") {
  auto path = dir.write_script(
    "coder.sh",
    "#!/bin/sh\n"
    "a=\"$TASKSUP_ARTIFACTS_DIR\"\n"
    "env | grep -E '^(TASKSUP_TRACE_ID|TASKSUP_SPAN_ID|TRACEPARENT)=' "
    "| sort > \"$a/trace.txt\"\n"
    "printf '%s' \"$1\" > \"$a/prompt.txt\"\n"
    "if [ -n \"$TASKSUP_FEEDBACK\" ]; then cp \"$TASKSUP_FEEDBACK\" "
    "\"$a/feedback.txt\"; fi\n"
    "for f in stray.txt answer.txt; do\n"
    "  if [ -e \"$f\" ]; then echo \"LEFTOVER $f\"; fi\n"
    "done\n" +
      extra +
      "if [ \"$TASKSUP_ATTEMPT\" = 1 ]; then echo 41 > answer.txt; echo junk "
      "> stray.txt; else echo 42 > answer.txt; fi\n"
      "echo \"edited attempt $TASKSUP_ATTEMPT\"\n"
      "echo \"diagnostics\" >&2\n");
  return path;
}

/// A task file for `repo` run by `agent`.
std::string task_json(const std::string& id, const std::string& repo,
                      const std::string& agent, const std::string& more) {
  return "{\"id\": \"" + id + "\", \"prompt\": \"Make check.sh pass\"," +
         "\"agent_selection\": {\"agents\": [{\"agent_id\": \"coder\", " +
         "\"agent_cli\": \"" + agent + "\"}]}," +
         "\"supervisor\": {\"backoff_base_seconds\": 0.05}," +
         "\"repo\": {\"path\": \"" + repo + "\"}," +
         "\"gates\": [{\"name\": \"check\", \"command\": \"sh check.sh\"}]" +
         more + "}";
}

struct run_result {
  finished run;
  std::vector<boost::json::object> events;
};

run_result run_task(const scratch& dir, const std::string& name,
                    const std::string& json,
                    std::vector<std::string> extra = {}) {
  auto file = dir.write(name + ".json", json);
  auto events = dir / (name + ".jsonl");
  std::vector<std::string> args{"run",  "--config",   config_dir(), "--events",
                                events, "--work-dir", dir / "work"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back(file);
  run_result r;
  r.run = run_to_end(dir, args, 120s);
  r.events = json_lines(slurp(events));
  return r;
}

std::string text(const boost::json::object& e, const char* key) {
  return std::string{e.at(key).as_string()};
}

std::string attempt_dir(const scratch& dir, const std::string& id, int n) {
  return dir / ("work/" + id + "/attempt-" + std::to_string(n));
}

const boost::json::object& done_event(const run_result& r) {
  auto done = of_kind(r.events, "task_done");
  REQUIRE(done.size() == 1);
  static boost::json::object keep;
  keep = done.front();
  return keep;
}

} // namespace

TEST_CASE("repo task: a gate rejects the first attempt, the second learns "
          "why in a clean worktree and its change lands on tasksup/<id>",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto head_before = git(repo, {"rev-parse", "HEAD"});
  auto agent = make_agent(dir);
  auto r = run_task(dir, "t", task_json("fix1", repo, agent, ""));
  INFO(r.run.err);
  REQUIRE(r.run.status == 0);

  // Attempt 1 was judged by its gate, not by its exit code.
  auto cls = of_kind(r.events, "classified");
  REQUIRE(cls.size() == 1);
  CHECK(text(cls[0], "class") == "gate_failed");
  CHECK(text(cls[0], "rule") == "gate:check");
  CHECK(text(cls[0], "line").find("expected 42") != std::string::npos);
  auto steps = of_kind(r.events, "step");
  int gates_failed = 0, gates_passed = 0, delivered = 0;
  for (auto& s : steps) {
    if (text(s, "step") == "gate")
      (s.at("passed").as_bool() ? gates_passed : gates_failed)++;
    if (text(s, "step") == "deliver" && s.at("passed").as_bool())
      ++delivered;
  }
  CHECK(gates_failed == 1);
  CHECK(gates_passed == 1);
  CHECK(delivered == 1);

  // The second attempt saw none of the first one's edits...
  for (auto& e : of_kind(r.events, "log"))
    CHECK(text(e, "line").find("LEFTOVER") == std::string::npos);
  // ...and was told why it failed: in a file and in its prompt.
  auto a2 = attempt_dir(dir, "fix1", 2);
  auto feedback = slurp(a2 + "/artifacts/feedback.txt");
  CHECK(feedback.find("gate_failed") != std::string::npos);
  CHECK(feedback.find("FAIL: expected 42 in answer.txt, got '41'") !=
        std::string::npos);
  auto prompt = slurp(a2 + "/artifacts/prompt.txt");
  CHECK(prompt.rfind("Make check.sh pass", 0) == 0);
  CHECK(prompt.find("FAIL: expected 42") != std::string::npos);
  CHECK(slurp(attempt_dir(dir, "fix1", 1) + "/artifacts/prompt.txt") ==
        "Make check.sh pass");

  // The change is on tasksup/fix1, with a message naming task, agent and
  // attempt; the user's branch and working tree are untouched.
  CHECK(git(repo, {"show", "tasksup/fix1:answer.txt"}) ==
        std::vector<std::string>{"42"});
  CHECK_FALSE(git_ok(repo, {"cat-file", "-e", "tasksup/fix1:stray.txt"}));
  auto msg = git(repo, {"log", "-1", "--format=%s", "tasksup/fix1"});
  CHECK(msg ==
        std::vector<std::string>{"tasksup: task fix1, agent coder, attempt 2"});
  CHECK(git(repo, {"rev-parse", "HEAD"}) == head_before);
  CHECK(git(repo, {"rev-parse", "tasksup/fix1~1"}) == head_before);
  CHECK(git(repo, {"status", "--porcelain"}).empty());
  CHECK_FALSE(std::filesystem::exists(repo + "/answer.txt"));

  // The diff is an artifact of the result.
  auto& done = done_event(r);
  std::string patch;
  for (auto& a : done.at("artifacts").as_array())
    if (std::string{a.as_string()}.find("change.patch") != std::string::npos)
      patch = std::string{a.as_string()};
  REQUIRE_FALSE(patch.empty());
  CHECK(slurp(patch).find("+42") != std::string::npos);

  // Both worktrees are gone.
  CHECK(git(repo, {"worktree", "list"}).size() == 1);

  // Trace context reached the agent, matching the attempt's events.
  auto started = of_kind(r.events, "attempt_started");
  REQUIRE(started.size() == 2);
  auto trace = text(started[1], "trace_id");
  auto span = text(started[1], "span_id");
  auto seen = slurp(a2 + "/artifacts/trace.txt");
  CHECK(seen.find("TASKSUP_TRACE_ID=" + trace) != std::string::npos);
  CHECK(seen.find("TASKSUP_SPAN_ID=" + span) != std::string::npos);
  CHECK(seen.find("TRACEPARENT=00-" + trace + "-" + span + "-01") !=
        std::string::npos);

  // stdout and stderr lines stay apart in the events.
  bool out_line = false, err_line = false;
  for (auto& e : of_kind(r.events, "log")) {
    if (text(e, "line") == "edited attempt 2")
      out_line = text(e, "stream") == "stdout";
    if (text(e, "line") == "diagnostics")
      err_line = text(e, "stream") == "stderr";
  }
  CHECK(out_line);
  CHECK(err_line);
}

TEST_CASE("repo task: deliver apply changes the working tree, patch leaves "
          "the repository alone",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  SECTION("apply") {
    auto r = run_task(dir, "a",
                      task_json("ap1", repo, agent, ",\"deliver\": \"apply\""));
    INFO(r.run.err);
    REQUIRE(r.run.status == 0);
    CHECK(slurp(repo + "/answer.txt") == "42\n");
    CHECK_FALSE(std::filesystem::exists(repo + "/stray.txt"));
    CHECK_FALSE(git_ok(repo, {"rev-parse", "--verify", "tasksup/ap1"}));
  }
  SECTION("patch") {
    auto r = run_task(dir, "p",
                      task_json("pa1", repo, agent, ",\"deliver\": \"patch\""));
    INFO(r.run.err);
    REQUIRE(r.run.status == 0);
    CHECK_FALSE(std::filesystem::exists(repo + "/answer.txt"));
    CHECK_FALSE(git_ok(repo, {"rev-parse", "--verify", "tasksup/pa1"}));
    CHECK(git(repo, {"status", "--porcelain"}).empty());
    auto patch = attempt_dir(dir, "pa1", 2) + "/change.patch";
    CHECK(slurp(patch).find("+42") != std::string::npos);
  }
}

TEST_CASE("repo task: a delivery that conflicts fails the task and keeps the "
          "patch",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  // While the task runs, the user writes answer.txt in their working tree.
  auto agent = make_agent(dir, "echo 7 > \"$USER_REPO/answer.txt\"\n");
  auto r =
    run_task(dir, "c",
             task_json("cf1", repo, agent,
                       ",\"deliver\": \"apply\", \"env\": {\"USER_REPO\": \"" +
                         repo + "\"}"));
  CHECK(r.run.status != 0);
  CHECK(r.run.status != 2);
  auto& done = done_event(r);
  CHECK(text(done, "outcome") == "failed");
  auto error = text(done, "error");
  CHECK(error.find("delivery failed") != std::string::npos);
  CHECK(error.find("does not apply") != std::string::npos);
  // The user's file is theirs; the patch is kept.
  CHECK(slurp(repo + "/answer.txt") == "7\n");
  CHECK(slurp(attempt_dir(dir, "cf1", 2) + "/change.patch").find("+42") !=
        std::string::npos);
}

TEST_CASE("repo task: two tasks on one repository at once do not interfere",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  auto f1 = dir.write("c1.json", task_json("con1", repo, agent, ""));
  auto f2 = dir.write("c2.json", task_json("con2", repo, agent, ""));
  auto args = [&](const std::string& file, const std::string& work) {
    return std::vector<std::string>{"run",        "--config", config_dir(),
                                    "--work-dir", dir / work, file};
  };
  tasksup_child one{dir, "one", args(f1, "w1")};
  tasksup_child two{dir, "two", args(f2, "w2")};
  CHECK(one.wait(120s) == 0);
  CHECK(two.wait(120s) == 0);
  for (auto* id : {"tasksup/con1", "tasksup/con2"})
    CHECK(git(repo, {"show", std::string{id} + ":answer.txt"}) ==
          std::vector<std::string>{"42"});
  CHECK(git(repo, {"worktree", "list"}).size() == 1);
  CHECK(git(repo, {"status", "--porcelain"}).empty());
}

TEST_CASE("repo task: keep_failed keeps a failed attempt's worktree",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  // Always 41: every gate fails.
  auto agent = make_agent(dir, "echo 41 > answer.txt; exit 0\n");
  auto r = run_task(
    dir, "k2",
    "{\"id\": \"kf2\", \"prompt\": \"p\", \"agent_selection\": "
    "{\"agents\": [{\"agent_id\": \"coder\", \"agent_cli\": \"" +
      agent +
      "\"}]}, \"supervisor\": {\"max_retries_per_agent\": 1, "
      "\"backoff_base_seconds\": 0.05}, \"repo\": {\"path\": \"" +
      repo + "\"}, \"gates\": [\"sh check.sh\"], \"keep_failed\": true}");
  REQUIRE(r.run.status == 1);
  CHECK(text(done_event(r), "outcome") == "failed");
  for (int n : {1, 2}) {
    auto wt = attempt_dir(dir, "kf2", n) + "/workspace";
    CHECK(slurp(wt + "/answer.txt") == "41\n");
  }
  CHECK(git(repo, {"worktree", "list"}).size() == 3);
  CHECK_FALSE(git_ok(repo, {"rev-parse", "--verify", "tasksup/kf2"}));
}

TEST_CASE("repo task: admission rejects a bad task before anything runs",
          "[repo]") {
  scratch dir;
  std::filesystem::create_directories(dir / "not-a-repo");
  auto agent = make_agent(dir);
  auto r =
    run_task(dir, "bad", task_json("ad1", dir / "not-a-repo", agent, ""));
  CHECK(r.run.status == 2);
  CHECK(r.run.err.find("repository check") != std::string::npos);
  CHECK(r.run.err.find("/repo/path") != std::string::npos);
  CHECK(r.events.empty());
  CHECK_FALSE(std::filesystem::exists(dir / "work/ad1"));

  auto repo = make_repo(dir);
  r = run_task(dir, "bad2",
               "{\"id\": \"ad2\", \"prompt\": \"p\", \"agent_selection\": "
               "{\"agents\": [{\"agent_id\": \"x\", \"agent_cli\": "
               "\"no-such-agent-cli\"}]}, \"repo\": {\"path\": \"" +
                 repo + "\", \"base\": \"no-such-branch\"}}");
  CHECK(r.run.status == 2);
  CHECK(r.run.err.find("/repo/base") != std::string::npos);
}

TEST_CASE("repo task: a failing preflight skips the attempt with its own "
          "class",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  auto mark = dir / "preflight-ran";
  // The user's own shell: fails once, then passes.
  auto r = run_task(dir, "pf",
                    task_json("pf1", repo, agent,
                              ",\"preflight\": [\"sh\", \"-c\", \"test -e " +
                                mark + " || { touch " + mark +
                                "; echo quota low; exit 3; }\"]"));
  INFO(r.run.err);
  REQUIRE(r.run.status == 0);
  auto cls = of_kind(r.events, "classified");
  REQUIRE(cls.size() == 1);
  CHECK(text(cls[0], "class") == "preflight_failed");
  CHECK(text(cls[0], "line") == "quota low");
  // The skipped attempt 1 never started an agent: the agent's first run is
  // attempt 2 (which writes the right answer).
  auto started = of_kind(r.events, "attempt_started");
  REQUIRE(started.size() == 1);
  CHECK(started[0].at("attempt").as_int64() == 2);
  CHECK(git(repo, {"show", "tasksup/pf1:answer.txt"}) ==
        std::vector<std::string>{"42"});
}

TEST_CASE("attempt timeout stops one attempt and classifies it timeout",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent =
    make_agent(dir, "if [ \"$TASKSUP_ATTEMPT\" = 1 ]; then sleep 60; fi\n");
  auto start = steady::now();
  auto r = run_task(dir, "to",
                    "{\"id\": \"to1\", \"prompt\": \"p\", \"agent_selection\": "
                    "{\"agents\": [{\"agent_id\": \"coder\", \"agent_cli\": "
                    "\"" +
                      agent +
                      "\"}]}, \"supervisor\": {\"attempt_timeout_s\": 1, "
                      "\"stop_grace_s\": 1, \"backoff_base_seconds\": 0.05}, "
                      "\"repo\": {\"path\": \"" +
                      repo + "\"}}");
  INFO(r.run.err);
  REQUIRE(r.run.status == 0);
  CHECK(steady::now() - start < 30s);
  auto cls = of_kind(r.events, "classified");
  REQUIRE(cls.size() == 1);
  CHECK(text(cls[0], "class") == "timeout");
  CHECK(text(cls[0], "rule") == "attempt_timeout");
}

TEST_CASE("a permanent task ends when its agent says it is done", "[repo]") {
  scratch dir;
  auto agent =
    dir.write_script("loop.sh", "#!/bin/sh\n"
                                "echo round $TASKSUP_ATTEMPT\n"
                                "if [ \"$TASKSUP_ATTEMPT\" = 3 ]; then\n"
                                "  touch \"$TASKSUP_DONE_FILE\"\n"
                                "fi\n");
  auto r = run_task(
    dir, "perm",
    "{\"id\": \"pm1\", \"prompt\": \"p\", \"agent_selection\": {\"agents\": "
    "[{\"agent_id\": \"loop\", \"agent_cli\": \"" +
      agent +
      "\"}]}, \"supervisor\": {\"restart\": \"permanent\", "
      "\"restart_backoff\": {\"kind\": \"table\", \"table_s\": [0.1, 0.2]}}}");
  INFO(r.run.err);
  REQUIRE(r.run.status == 0);
  CHECK(of_kind(r.events, "attempt_started").size() == 3);
  // Each restart was announced with its delay from the restart schedule.
  auto retries = of_kind(r.events, "retry_scheduled");
  REQUIRE(retries.size() == 2);
  CHECK(retries[0].at("delay_s").as_double() == Approx(0.1));
  CHECK(retries[1].at("delay_s").as_double() == Approx(0.2));
  bool voluntary = false;
  for (auto& s : of_kind(r.events, "step"))
    voluntary = voluntary || text(s, "step") == "voluntary_end";
  CHECK(voluntary);
  CHECK(text(done_event(r), "outcome") == "succeeded");
}

TEST_CASE("repo task in a container: a fresh checkout per attempt",
          "[repo][docker]") {
  auto options = rt::docker_options_from_environment();
  if (!options || !rt::docker_engine_version(*options)) {
    WARN("no Docker engine; run scripts/docker-setup.sh");
    return;
  }
  std::string image;
  {
    std::ifstream in{TASKSUP_SOURCE_DIR "/scripts/docker-test-image"};
    std::getline(in, image);
  }
  auto present = rt::docker_image_present(*options, image);
  if (!present || !*present) {
    WARN("image " << image << " missing; run scripts/docker-setup.sh");
    return;
  }
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  // An image that is not on this host is refused at admission.
  auto missing = run_task(dir, "dk0",
                          task_json("dk0", repo, "/agent/coder.sh",
                                    ",\"runtime\": \"docker\", \"image\": "
                                    "\"tasksup/no-such-image:none\""));
  CHECK(missing.run.status == 2);
  CHECK(missing.run.err.find("image check") != std::string::npos);
  auto r = run_task(
    dir, "dk",
    task_json("dk1", repo, "/agent/coder.sh",
              ",\"runtime\": \"docker\", \"image\": \"" + image +
                "\", \"mounts\": [{\"host_path\": \"" + dir.path() +
                "\", \"container_path\": \"/agent\", \"read_only\": true}]"));
  INFO(r.run.err);
  REQUIRE(r.run.status == 0);
  for (auto& e : of_kind(r.events, "log"))
    CHECK(text(e, "line").find("LEFTOVER") == std::string::npos);
  auto cls = of_kind(r.events, "classified");
  REQUIRE(cls.size() == 1);
  CHECK(text(cls[0], "class") == "gate_failed");
  CHECK(git(repo, {"show", "tasksup/dk1:answer.txt"}) ==
        std::vector<std::string>{"42"});
  CHECK(git(repo, {"worktree", "list"}).size() == 1);
  CHECK(slurp(attempt_dir(dir, "dk1", 2) + "/artifacts/feedback.txt")
          .find("expected 42") != std::string::npos);
}

TEST_CASE("repo task: a node refuses a task that fails admission and keeps "
          "nothing of it",
          "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  std::filesystem::create_directories(dir / "not-a-repo");
  tasksup_child node{dir,
                     "serve",
                     {"serve", "--listen", "127.0.0.1:0", "--config",
                      config_dir(), "--work-dir", dir / "node-work",
                      "--state-dir", dir / "state"}};
  auto port = listening_port(node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto bad =
    dir.write("bad.json", task_json("same-id", dir / "not-a-repo", agent, ""));
  auto refused = run_to_end(dir, {"submit", "--node", address, bad}, 60s);
  CHECK(refused.status != 0);
  CHECK(refused.err.find("rejected at admission") != std::string::npos);
  CHECK(refused.err.find("repository check") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "node-work/same-id"));
  // Nothing was queued under its id: a good task may take it.
  auto good = dir.write("good.json", task_json("same-id", repo, agent, ""));
  auto accepted = run_to_end(dir, {"submit", "--node", address, good}, 60s);
  INFO(accepted.err);
  CHECK(accepted.status == 0);
  CHECK(accepted.out.find("same-id") != std::string::npos);
  CHECK(eventually(
    [&] {
      return git_ok(repo, {"rev-parse", "--verify", "tasksup/same-id"});
    },
    60s));
}

TEST_CASE("repo task: a node's allowed_paths confine repositories", "[repo]") {
  scratch dir;
  auto repo = make_repo(dir);
  auto agent = make_agent(dir);
  auto config = dir / "config";
  std::filesystem::create_directories(config);
  std::filesystem::create_directories(dir / "allowed");
  dir.write("config/node.json",
            "{\"allowed_paths\": [\"" + dir / "allowed" + "\"]}");
  auto file = dir.write("t.json", task_json("ap1", repo, agent, ""));
  // The repository's real path is outside, also when named through `..`.
  auto sneaky =
    dir.write("t2.json", task_json("ap2", dir / "allowed/../repo", agent, ""));
  for (auto& f : {file, sneaky}) {
    auto r = run_to_end(
      dir, {"run", "--config", config, "--work-dir", dir / "work", f}, 60s);
    CHECK(r.status == 2);
    CHECK(r.err.find("outside the node's allowed_paths") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir / "work"));
}

TEST_CASE("repo task: a workflow step sees the steps it depends on: their "
          "results in TASKSUP_INPUTS and the branch one delivered in its "
          "prompt") {
  scratch dir;
  auto repo = make_repo(dir);
  auto coder = make_agent(dir);
  auto reviewer =
    dir.write_script("reviewer.sh", "#!/bin/sh\n"
                                    "printf '%s' \"$1\" > '" +
                                      dir / "review-prompt.txt" +
                                      "'\n"
                                      "cp \"$TASKSUP_INPUTS\" '" +
                                      dir / "review-inputs.json" + "'\n");
  auto wf = std::string{R"({"id": "wf", "steps": [
    {"id": "code", "task": {"prompt": "Make check.sh pass",
      "agent_selection": {"agents": [{"agent_id": "coder", "agent_cli": ")"} +
            coder + R"("}]},
      "supervisor": {"backoff_base_seconds": 0.05},
      "repo": {"path": ")" +
            repo + R"("},
      "gates": [{"name": "check", "command": "sh check.sh"}]}},
    {"id": "review", "depends_on": ["code"], "task": {
      "prompt": "Review {{steps.code.branch}} please",
      "agent_selection": {"agents": [{"agent_id": "reviewer", "agent_cli": ")" +
            reviewer +
            R"(", "cli_flags": "", "prompt_as_argument": true}]}}}]})";
  auto r = run_task(dir, "wf", wf);
  INFO(r.run.out << r.run.err);
  REQUIRE(r.run.status == 0);
  CHECK(git(repo, {"show", "tasksup/wf.code:answer.txt"}) ==
        std::vector<std::string>{"42"});
  CHECK(slurp(dir / "review-prompt.txt") == "Review tasksup/wf.code please");
  boost::system::error_code ec;
  auto inputs = boost::json::parse(slurp(dir / "review-inputs.json"), ec);
  REQUIRE_FALSE(ec);
  auto& o = inputs.as_object();
  CHECK(text(o, "workflow") == "wf");
  CHECK(text(o, "step") == "review");
  auto& code = o.at("steps").as_object().at("code").as_object();
  CHECK(text(code, "task_id") == "wf.code");
  CHECK(text(code, "outcome") == "succeeded");
  CHECK(text(code, "branch") == "tasksup/wf.code");
  CHECK(text(code, "attempt_dir") == attempt_dir(dir, "wf.code", 2));
}

namespace {

/// Runs the shipped workflow example `name` on a repository its script
/// makes at `repo` (in the scratch directory, not /tmp), with the
/// example's agents by absolute path.
run_with_events run_example_workflow(const scratch& dir,
                                     const std::string& name,
                                     const std::string& repo) {
  rt::command_options make;
  make.argv = {example("make-example-repo.sh"), repo};
  make.timeout_s = 60;
  auto made = rt::run_command(make);
  INFO(made.last_line());
  REQUIRE(made.passed());
  auto text = slurp(example(name));
  auto replace = [&](const std::string& from, const std::string& to) {
    for (auto at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  replace("/tmp/tasksup-example-repo", repo);
  replace("./agents/", example("agents/"));
  return run_file(dir, "events", dir.write(name, text));
}

} // namespace

TEST_CASE("the shipped repository workflow runs: the planner's answer fills "
          "the implementer's prompt, the change is delivered on a branch, "
          "and the reviewer's first answer is refused and its second "
          "approves") {
  scratch dir;
  auto repo = dir / "example-repo";
  auto [ran, evs] = run_example_workflow(dir, "workflow-repo.json", repo);
  INFO(ran.out << ran.err);
  REQUIRE(ran.status == 0);
  // Each step's answer is its result.
  std::map<std::string, boost::json::object> answers;
  for (auto& e : of_kind(evs, "task_done"))
    if (auto* a = e.if_contains("answer"))
      answers[text_at(e, "task_id")] = a->as_object();
  REQUIRE(answers.count("greet.plan") == 1);
  CHECK(text_at(answers["greet.plan"], "summary") == "greet the world by name");
  REQUIRE(answers.count("greet.code") == 1);
  REQUIRE(answers.count("greet.review") == 1);
  CHECK(text_at(answers["greet.review"], "verdict") == "approve");
  // The reviewer's first answer lacked its comments.
  std::vector<std::string> classes;
  for (auto& e : of_kind(evs, "classified"))
    classes.push_back(text_at(e, "task_id") + " " + text_at(e, "class"));
  CHECK(classes == std::vector<std::string>{"greet.review invalid_output"});
  // The implementer's change is on its branch, made from the plan.
  auto shown = git(repo, {"show", "tasksup/greet.code:greeting.txt"});
  CHECK(shown == std::vector<std::string>{"hello", "hello, world"});
  // The implementer's prompt (kept as its artifact) had the plan's summary
  // and steps in it.
  std::string prompt;
  for (auto& e : of_kind(evs, "task_done"))
    if (text_at(e, "task_id") == "greet.code")
      for (auto& a : e.at("artifacts").as_array())
        if (std::string{a.as_string()}.find("prompt.txt") != std::string::npos)
          prompt = slurp(std::string{a.as_string()});
  CHECK_THAT(prompt, Catch::Contains("Do this: greet the world by name. "
                                     "Steps: [\"edit greeting.txt\",\"say "
                                     "hello to the world\"]"));
  CHECK_THAT(prompt, Catch::Contains("You are the implementer"));
}

TEST_CASE("the shipped best-of-3 workflow races three implementers: the "
          "first whose gates pass is delivered, the others are stopped and "
          "leave no worktree or branch, each one's outcome is in the "
          "history, and the review sees the winner's branch") {
  scratch dir;
  auto repo = dir / "example-repo";
  auto [ran, evs] = run_example_workflow(dir, "workflow-best-of.json", repo);
  INFO(ran.out << ran.err);
  REQUIRE(ran.status == 0);
  // The race is a group of the three racers; its end names the winner.
  std::string winner;
  for (auto& e : of_kind(evs, "group"))
    if (text_at(e, "task_id") == "race.code" &&
        text_at(e, "change") == "ended") {
      CHECK(text_at(e, "how") == "won");
      CHECK(text_at(e, "outcome") == "succeeded");
      winner = text_at(e, "member");
    }
  REQUIRE_THAT(winner, Catch::StartsWith("race.code."));
  CHECK_THAT(ran.out, Catch::Contains("won by '" + winner + "'"));
  // Every racer's run ended in the history: the winner by the quick agent
  // (the careful one takes 10 s, the sloppy one's change fails the gate),
  // the others stopped or failed.
  std::map<std::string, std::string> outcomes;
  for (auto& e : of_kind(evs, "task_done")) {
    auto id = text_at(e, "task_id");
    outcomes[id] = text_at(e, "outcome");
    if (id == winner)
      CHECK(text_at(e.at("metadata").as_object(), "agent_id") == "quick");
  }
  for (auto k : {"1", "2", "3"}) {
    auto id = std::string{"race.code."} + k;
    INFO(id);
    REQUIRE(outcomes.count(id) == 1);
    CHECK(outcomes[id] == (id == winner ? "succeeded" : "stopped"));
  }
  // One branch, the winner's, holds the change; the losers' worktrees are
  // gone with them.
  CHECK(
    git(repo, {"branch", "--list", "tasksup/*", "--format=%(refname:short)"}) ==
    std::vector<std::string>{"tasksup/" + winner});
  auto shown = git(repo, {"show", "tasksup/" + winner + ":greeting.txt"});
  CHECK(shown ==
        std::vector<std::string>{"hello", "hello, world (by the quick agent)"});
  std::size_t worktrees = 0;
  for (auto& line : git(repo, {"worktree", "list", "--porcelain"}))
    worktrees += line.rfind("worktree ", 0) == 0;
  CHECK(worktrees == 1);
  // The review got the winner's branch and answer, in its prompt and its
  // inputs, and approved.
  std::string prompt;
  for (auto& e : of_kind(evs, "task_done"))
    if (text_at(e, "task_id") == "race.review") {
      CHECK(text_at(e.at("answer").as_object(), "verdict") == "approve");
      for (auto& a : e.at("artifacts").as_array())
        if (std::string{a.as_string()}.find("prompt.txt") != std::string::npos)
          prompt = slurp(std::string{a.as_string()});
    }
  CHECK_THAT(prompt, Catch::Contains("Review branch tasksup/" + winner +
                                     ": greeting.txt greets the world "
                                     "(quick)"));
  auto inputs =
    boost::json::parse(slurp(dir / "work/race.review/inputs.json")).as_object();
  auto& code = inputs.at("steps").at("code").as_object();
  CHECK(text_at(code, "task_id") == "race.code");
  CHECK(text_at(code, "winner") == winner);
  CHECK(text_at(code, "branch") == "tasksup/" + winner);
  CHECK(text_at(code, "outcome") == "succeeded");
  CHECK_THAT(text_at(code.at("answer").as_object(), "summary"),
             Catch::Contains("(quick)"));
}

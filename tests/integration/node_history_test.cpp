// End-to-end: what a durable node offers a user beyond running tasks, with
// real `tasksup serve` processes and real agents: a corrupt journal stops
// the node; `logs --follow`, `wait [--timeout]` and `describe` report a
// task as it runs and after; `submit --replace` keeps the replaced task's
// attempt directories, and an attempt directory without a record is moved
// aside; a Docker attempt outlives a node killed with SIGKILL
// and is adopted by the restarted node.

#include "tasksup_child.hpp"

#include "tasksup/runtime/docker_runtime.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup::test;
namespace fs = std::filesystem;

namespace {

/// A `tasksup serve` on a free loopback port with its state in `dir`.
class node {
public:
  explicit node(const scratch& dir, const std::string& name = "serve")
    : dir_(dir),
      child_(std::make_unique<tasksup_child>(
        dir, name,
        std::vector<std::string>{
          "serve", "--listen", "127.0.0.1:0", "--config", dir / "config",
          "--work-dir", dir / "node-work", "--state-dir", dir / "state"})) {
    auto port = listening_port(*child_);
    if (!port)
      FAIL("the node did not start: " << child_->err());
    address_ = "127.0.0.1:" + std::to_string(*port);
  }

  /// Runs a command against this node to its end.
  finished cmd(std::vector<std::string> args,
               std::chrono::milliseconds limit = 30s) {
    args.push_back("--node");
    args.push_back(address_);
    return run_to_end(dir_, args, limit);
  }

  /// Starts a command against this node and returns it running.
  std::unique_ptr<tasksup_child> start(const std::string& name,
                                       std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address_);
    return std::make_unique<tasksup_child>(dir_, name, args);
  }

  /// The task's state ("" when the node does not know it).
  std::string state(const std::string& id) {
    auto r = cmd({"status", id, "--json"});
    if (r.status != 0)
      return {};
    auto o = boost::json::parse(r.out).as_object();
    return o.contains("state") ? std::string{o.at("state").as_string()} : "";
  }

  bool wait_done(const std::string& id, std::chrono::milliseconds limit = 60s) {
    return eventually([&] { return state(id) == "done"; }, limit);
  }

  tasksup_child& process() { return *child_; }

private:
  const scratch& dir_;
  std::unique_ptr<tasksup_child> child_;
  std::string address_;
};

/// A config directory with the shipped classifier rules and `node_json`.
void write_config(const scratch& dir, const std::string& node_json = "{}") {
  fs::create_directories(dir / "config");
  dir.write("config/node.json", node_json);
  fs::copy_file(config_dir() + "/classifier.json",
                dir / "config/classifier.json",
                fs::copy_options::overwrite_existing);
}

/// An executable shell script in `dir`.
std::string script(const scratch& dir, const std::string& name,
                   const std::string& body) {
  auto path = dir.write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

/// An agent that prints "run <n>" on its n-th run, then runs `tail` (with
/// `$n` set), e.g. to fail its first run.
std::string counting_agent(const scratch& dir, const std::string& tail = "") {
  auto count = dir / "count";
  return script(dir, "count.sh",
                "n=$(cat '" + count +
                  "' 2>/dev/null || echo 0); n=$((n + 1))\n"
                  "echo $n > '" +
                  count + "'\necho \"run $n\"\n" + tail);
}

/// A task running `agent` once (no retries unless `supervisor` says so).
std::string
task_file(const scratch& dir, const std::string& id, const std::string& agent,
          const std::string& supervisor = R"("max_retries_per_agent": 0)") {
  return dir.write(id + ".json", R"({"id": ")" + id + R"(", "prompt": "work",
    "agent_selection": {"agents": [{"agent_id": "sh", "agent_cli": ")" +
                                   agent + R"(", "cli_flags": "",
      "prompt_as_argument": false}]},
    "supervisor": {)" + supervisor +
                                   "}}");
}

/// Position of `what` in `text` at or after `from` (npos when absent).
std::size_t after(const std::string& text, const std::string& what,
                  std::size_t from) {
  return from == std::string::npos ? from : text.find(what, from);
}

} // namespace

TEST_CASE("serve: a corrupt journal stops the node at start, naming the "
          "file, and the file is left as it was",
          "[journal]") {
  scratch dir;
  write_config(dir);
  auto agent = script(dir, "ok.sh", "echo fine\n");
  {
    node n{dir};
    for (int i = 0; i < 20; ++i) {
      auto id = "t" + std::to_string(i);
      REQUIRE(n.cmd({"submit", task_file(dir, id, agent)}).status == 0);
    }
    REQUIRE(n.wait_done("t19"));
    n.process().signal(SIGTERM);
    REQUIRE(n.process().wait(60s) == 0);
  }
  auto db = dir / "state/journal.db";
  REQUIRE(fs::file_size(db) >= 3 * 4096);
  // One page in the middle of the file overwritten, as a failing disk or a
  // stray write would.
  {
    std::fstream f{db, std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(4096);
    std::string junk(4096, '\xa5');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto before = slurp(db);
  tasksup_child serve{dir,
                      "serve-corrupt",
                      {"serve", "--listen", "127.0.0.1:0", "--config",
                       dir / "config", "--work-dir", dir / "node-work",
                       "--state-dir", dir / "state"}};
  auto status = serve.wait(60s);
  INFO(serve.err());
  CHECK(status != 0);
  CHECK(status != -1); // it ended by itself
  CHECK(serve.err().find(db) != std::string::npos);
  CHECK(serve.err().find("listening on") == std::string::npos);
  CHECK(slurp(db) == before);
}

TEST_CASE("logs --follow prints a running attempt's output as it is written "
          "and ends when the task ends",
          "[journal]") {
  scratch dir;
  write_config(dir);
  auto agent = script(dir, "steps.sh",
                      "echo 'step one'\n"
                      "while [ ! -e '" +
                        dir / "go1" +
                        "' ]; do sleep 0.02; done\n"
                        "echo 'step two' >&2\n"
                        "while [ ! -e '" +
                        dir / "go2" +
                        "' ]; do sleep 0.02; done\n"
                        "echo 'step three'\n");
  node n{dir};
  REQUIRE(n.cmd({"submit", task_file(dir, "lf", agent)}).status == 0);
  // The attempt runs and has written its first line.
  REQUIRE(eventually(
    [&] {
      return slurp(dir / "node-work/lf/attempt-1/output.log") == "step one\n";
    },
    30s));
  auto follow = n.start("follow", {"logs", "lf", "--follow"});
  CHECK(eventually(
    [&] { return follow->out().find("step one\n") != std::string::npos; },
    30s));
  CHECK_FALSE(follow->exited());
  dir.write("go1", "");
  CHECK(eventually(
    [&] { return follow->out().find("step two\n") != std::string::npos; },
    30s));
  CHECK_FALSE(follow->exited());
  dir.write("go2", "");
  INFO(follow->err());
  CHECK(follow->wait(30s) == 0);
  CHECK(follow->out() == "step one\nstep two\nstep three\n");
  CHECK(n.state("lf") == "done");
  // Without --follow, a finished attempt prints the same and ends.
  auto again = n.cmd({"logs", "lf", "--attempt", "1"});
  CHECK(again.status == 0);
  CHECK(again.out == "step one\nstep two\nstep three\n");
}

TEST_CASE("wait --timeout exits 124 while the task runs, and wait exits with "
          "the task's status once it ends",
          "[journal]") {
  scratch dir;
  write_config(dir);
  auto agent = script(dir, "slow.sh",
                      "while [ ! -e '" + dir / "go" +
                        "' ]; do sleep 0.02; done\n"
                        "echo 'gave up' >&2\nexit 5\n");
  auto ok = script(dir, "ok.sh", "echo fine\n");
  node n{dir};
  REQUIRE(n.cmd({"submit", task_file(dir, "wt", agent)}).status == 0);
  auto timed_out = n.cmd({"wait", "wt", "--timeout", "0.5"});
  CHECK(timed_out.status == 124);
  CHECK(timed_out.err.find("has not finished") != std::string::npos);
  CHECK(n.state("wt") != "done");
  dir.write("go", "");
  // Failed with the agent's exit code (no retries allowed).
  auto failed = n.cmd({"wait", "wt"}, 60s);
  INFO(failed.err);
  CHECK(failed.status == 5);
  // Already finished: answers at once, --timeout or not.
  CHECK(n.cmd({"wait", "wt", "--timeout", "30"}).status == 5);
  REQUIRE(n.cmd({"submit", task_file(dir, "wt-ok", ok)}).status == 0);
  CHECK(n.cmd({"wait", "wt-ok", "--timeout", "60"}, 60s).status == 0);
  // An unknown task: the node does not know it.
  CHECK(n.cmd({"wait", "no-such-task", "--timeout", "1"}).status == 3);
}

TEST_CASE("describe shows each attempt, how its failure was classified and "
          "the decision taken, in order",
          "[journal]") {
  scratch dir;
  write_config(dir);
  // Fails its first attempt with a transient error, then succeeds.
  auto agent = script(dir, "flaky.sh",
                      "if [ \"$TASKSUP_ATTEMPT\" -lt 2 ]; then\n"
                      "  echo 'connection reset by peer' >&2; exit 1\n"
                      "fi\necho done\n");
  node n{dir};
  REQUIRE(n.cmd({"submit", task_file(dir, "ds", agent,
                                     R"("max_retries_per_agent": 2,
                                        "backoff_base_seconds": 0.1)")})
            .status == 0);
  REQUIRE(n.wait_done("ds"));
  auto d = n.cmd({"describe", "ds"});
  INFO(d.out << d.err);
  REQUIRE(d.status == 0);
  auto& out = d.out;
  auto p = out.find("task ds\n");
  p = after(out, "submitted", p);
  p = after(out, "attempt 1 started: agent sh", p);
  p = after(out, "attempt 1 exited 1 after", p);
  p = after(out, "class retryable, rule", p);
  p = after(out, "line \"connection reset by peer\"", p);
  p = after(out, "decision: retry 1/2 in", p);
  p = after(out, "attempt 2 started: agent sh", p);
  p = after(out, "attempt 2 exited 0", p);
  p = after(out, "done: succeeded", p);
  CHECK(p != std::string::npos);
  // Every line but the first starts with an ISO 8601 UTC time.
  std::istringstream lines{out};
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.size() > 20);
    CHECK(line[4] == '-');
    CHECK(line[10] == 'T');
    CHECK(line[19] == 'Z');
  }
  CHECK(n.cmd({"describe", "no-such-task"}).status == 3);
}

TEST_CASE("submit --replace runs a finished task again and keeps the old "
          "attempt directories as <id>.replaced-<n>",
          "[journal]") {
  scratch dir;
  write_config(dir);
  auto task = task_file(dir, "rp", counting_agent(dir));
  node n{dir};
  REQUIRE(n.cmd({"submit", task}).status == 0);
  REQUIRE(n.wait_done("rp"));
  // The id is taken: refused without --replace, nothing changes.
  auto refused = n.cmd({"submit", task});
  CHECK(refused.status != 0);
  CHECK(refused.err.find("--replace") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "node-work/rp.replaced-1"));
  for (int run = 2; run <= 3; ++run) {
    INFO("run " << run);
    auto replaced = n.cmd({"submit", "--replace", task});
    INFO(replaced.err);
    REQUIRE(replaced.status == 0);
    REQUIRE(n.wait_done("rp"));
    REQUIRE(n.cmd({"wait", "rp"}).status == 0);
    CHECK(slurp(dir / "node-work/rp/attempt-1/output.log") ==
          "run " + std::to_string(run) + "\n");
  }
  CHECK(slurp(dir / "node-work/rp.replaced-1/attempt-1/output.log") ==
        "run 1\n");
  CHECK(slurp(dir / "node-work/rp.replaced-2/attempt-1/output.log") ==
        "run 2\n");
  CHECK(n.cmd({"logs", "rp"}).out == "run 3\n");
  // The node's history is the new run's.
  auto d = n.cmd({"describe", "rp"});
  CHECK(d.out.find("attempt 2") == std::string::npos);
}

TEST_CASE("serve: an attempt directory the journal has no record of (left "
          "by a machine crash) is moved aside, never reused",
          "[journal]") {
  scratch dir;
  write_config(dir);
  auto task =
    task_file(dir, "ua", counting_agent(dir, "[ $n -gt 1 ]\n"),
              R"("max_retries_per_agent": 1, "backoff_base_seconds": 3600)");
  auto first = std::make_unique<node>(dir, "serve-1");
  REQUIRE(first->cmd({"submit", task}).status == 0);
  REQUIRE(eventually([&] { return first->state("ua") == "backoff"; }, 30s));
  first->process().signal(SIGKILL);
  REQUIRE(first->process().wait(10s) == 128 + SIGKILL);
  // What a machine crash can leave: attempt 2 had started (its directory
  // is on disk) but its record had not reached the disk.
  auto attempt2 = dir / "node-work/ua/attempt-2";
  fs::create_directories(attempt2);
  dir.write("node-work/ua/attempt-2/output.log", "lost run\n");
  auto second = std::make_unique<node>(dir, "serve-2");
  REQUIRE(eventually([&] { return second->state("ua") == "backoff"; }, 30s));
  CHECK(second->process().err().find("has no record in the journal") !=
        std::string::npos);
  REQUIRE(second->cmd({"retry-now", "ua"}).status == 0);
  REQUIRE(second->wait_done("ua"));
  CHECK(second->cmd({"wait", "ua"}).status == 0);
  CHECK(slurp(attempt2 + "/output.log") == "run 2\n");
  CHECK(slurp(attempt2 + ".unrecorded/output.log") == "lost run\n");
  // The attempt before the crash is untouched.
  CHECK(slurp(dir / "node-work/ua/attempt-1/output.log") == "run 1\n");
  second->process().signal(SIGTERM);
  CHECK(second->process().wait(60s) == 0);
}

namespace {

std::string docker_test_image() {
  if (const char* env = std::getenv("TASKSUP_DOCKER_IMAGE"); env && *env)
    return env;
  std::ifstream in{TASKSUP_SOURCE_DIR "/scripts/docker-test-image"};
  std::string line;
  std::getline(in, line);
  return line;
}

/// Empty when the engine answers and holds the test image, else why not.
std::string docker_problem() {
  namespace rt = tasksup::runtime;
  auto options = rt::docker_options_from_environment();
  if (!options)
    return options.error().to_string();
  if (auto v = rt::docker_engine_version(*options); !v)
    return "no Docker engine: " + v.error().to_string();
  auto present = rt::docker_image_present(*options, docker_test_image());
  if (!present)
    return present.error().to_string();
  if (!*present)
    return "image " + docker_test_image() +
           " missing; run scripts/docker-setup.sh";
  return {};
}

/// True when Docker tests can run; skips with a warning, or fails under CI.
bool docker_ready() {
  auto problem = docker_problem();
  if (problem.empty())
    return true;
  if (const char* ci = std::getenv("CI");
      ci && (std::string{ci} == "true" || std::string{ci} == "1"))
    FAIL("CI is set but the Docker engine is not usable: " << problem);
  WARN("skipping Docker test: " << problem);
  return false;
}

std::size_t containers_of(const std::string& task_id) {
  namespace rt = tasksup::runtime;
  auto options = rt::docker_options_from_environment();
  REQUIRE(options);
  auto list =
    rt::list_docker_containers(*options, "tasksup.task_id=" + task_id);
  REQUIRE(list);
  return list->size();
}

} // namespace

TEST_CASE("serve: a docker attempt outlives a node killed with SIGKILL, "
          "and the restarted node adopts it and reports its real exit",
          "[journal][docker]") {
  if (!docker_ready())
    return;
  scratch dir;
  write_config(dir);
  auto id = "adopt-" + std::to_string(::getpid());
  // Runs until a file appears in its workspace, then fails with exit 7.
  dir.write(id + ".json", R"({"id": ")" + id + R"(", "prompt": "work",
    "runtime": "docker", "image": ")" +
                            docker_test_image() + R"(",
    "agent_selection": {"agents": [{"agent_id": "box", "agent_cli": "/bin/sh",
      "cli_flags": "-c 'echo before; while [ ! -e /workspace/go ]; do sleep 0.05; done; echo after; echo \"the end\" >&2; exit 7'",
      "prompt_as_argument": false}]},
    "supervisor": {"max_retries_per_agent": 0}})");
  auto first = std::make_unique<node>(dir, "serve-1");
  REQUIRE(first->cmd({"submit", dir / (id + ".json")}, 60s).status == 0);
  auto attempt = dir / ("node-work/" + id + "/attempt-1");
  REQUIRE(eventually(
    [&] {
      return slurp(attempt + "/output.log").find("before") != std::string::npos;
    },
    180s));
  first->process().signal(SIGKILL);
  REQUIRE(first->process().wait(10s) == 128 + SIGKILL);
  // The container runs on without its node.
  CHECK(containers_of(id) == 1);
  auto second = std::make_unique<node>(dir, "serve-2");
  INFO(second->process().err());
  CHECK(eventually([&] { return second->state(id) == "running"; }, 30s));
  std::ofstream{attempt + "/workspace/go"} << "go";
  REQUIRE(second->wait_done(id, 180s));
  auto status =
    boost::json::parse(second->cmd({"status", id, "--json"}).out).as_object();
  auto& result = status.at("result").as_object();
  CHECK(result.at("outcome").as_string() == "failed");
  CHECK(second->cmd({"wait", id}).status == 7);
  // One attempt, counted once, classified from its real last line.
  auto d = second->cmd({"describe", id});
  INFO(d.out);
  CHECK(d.out.find("attempt 1 exited 7") != std::string::npos);
  CHECK(d.out.find("attempt 2") == std::string::npos);
  CHECK(d.out.find("done: failed") != std::string::npos);
  auto log = slurp(attempt + "/output.log");
  CHECK(log.find("before") == log.rfind("before"));
  CHECK(log.find("after") != std::string::npos);
  CHECK(log.find("the end") != std::string::npos);
  CHECK(containers_of(id) == 0);
  second->process().signal(SIGTERM);
  CHECK(second->process().wait(60s) == 0);
}

// End-to-end: `tasksup run` on the example tasks, as a user runs it.

#include "tasksup_child.hpp"

#include "tasksup/runtime/docker_runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace tasksup::test;
namespace fs = std::filesystem;

namespace {

/// Runs an example task with `--events FILE`; returns the run and events.
struct run_outcome {
  finished run;
  std::vector<boost::json::object> events;
};

run_outcome run_example(const scratch& dir, const std::string& file) {
  auto events = dir / (file + ".jsonl");
  run_outcome r;
  r.run = run_to_end(dir, {"run", "--config", config_dir(), "--events", events,
                           "--work-dir", dir / "work", example(file)});
  r.events = json_lines(slurp(events));
  return r;
}

std::vector<std::string> kinds(const std::vector<boost::json::object>& evs,
                               bool skip_logs = true) {
  std::vector<std::string> out;
  for (auto& e : evs) {
    std::string k{e.at("event").as_string()};
    if (!skip_logs || k != "log")
      out.push_back(k);
  }
  return out;
}

std::string text(const boost::json::object& e, const char* key) {
  return std::string{e.at(key).as_string()};
}

} // namespace

TEST_CASE("run: demo-recovery falls back past a missing agent and waits out "
          "rate limits") {
  scratch dir;
  auto r = run_example(dir, "demo-recovery.json");
  INFO(r.run.out << r.run.err);
  REQUIRE(r.run.status == 0);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 3);
  CHECK(text(classified[0], "class") == "agent_failure");
  CHECK(text(classified[1], "class") == "rate_limit");
  CHECK(classified[1].at("retry_after_s").to_number<double>() == 1.0);
  CHECK(text(classified[2], "class") == "rate_limit");
  auto switched = of_kind(r.events, "agent_switched");
  REQUIRE(switched.size() == 1);
  CHECK(text(switched[0], "from") == "primary");
  CHECK(text(switched[0], "to") == "backup");
  REQUIRE(of_kind(r.events, "retry_scheduled").size() == 2);
  // Up to the end; `escalated` may follow once the run has its result.
  auto seq = kinds(r.events);
  REQUIRE(std::find(seq.begin(), seq.end(), "task_done") != seq.end());
  seq.erase(std::find(seq.begin(), seq.end(), "task_done") + 1, seq.end());
  CHECK(seq ==
        std::vector<std::string>{
          "task_submitted", "attempt_started", "attempt_exited", "classified",
          "agent_switched", "attempt_started", "attempt_exited", "classified",
          "retry_scheduled", "attempt_started", "attempt_exited", "classified",
          "retry_scheduled", "attempt_started", "attempt_exited", "task_done"});
  auto done = of_kind(r.events, "task_done").at(0);
  CHECK(text(done, "outcome") == "succeeded");
  auto& md = done.at("metadata").as_object();
  CHECK(md.at("fallback_count").to_number<int>() == 1);
  CHECK(md.at("total_attempts").to_number<int>() == 4);
  CHECK(md.at("agent_id").as_string() == "backup");
  // The human view (not a terminal here: plain lines) tells the same story.
  CHECK(r.run.out.find("switching agent: primary -> backup") !=
        std::string::npos);
  CHECK(r.run.out.find("retrying (1/3) backup in 1s") != std::string::npos);
  CHECK(r.run.out.find("task succeeded") != std::string::npos);
  CHECK(r.run.out.find("logs: " + dir / "work/demo-recovery") !=
        std::string::npos);
  CHECK(r.run.out.find('\r') == std::string::npos);
}

TEST_CASE("run: demo-fatal fails at once with the agent's exit code") {
  scratch dir;
  auto r = run_example(dir, "demo-fatal.json");
  INFO(r.run.out << r.run.err);
  REQUIRE(r.run.status == 1);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "fatal");
  CHECK(text(classified[0], "line").find("authentication failed") !=
        std::string::npos);
  CHECK(of_kind(r.events, "retry_scheduled").empty());
  CHECK(of_kind(r.events, "agent_switched").empty());
  CHECK(of_kind(r.events, "attempt_started").size() == 1);
  CHECK(text(of_kind(r.events, "task_done").at(0), "outcome") == "failed");
}

TEST_CASE("run: demo-exhausted fails after every agent of the chain") {
  scratch dir;
  auto r = run_example(dir, "demo-exhausted.json");
  INFO(r.run.out << r.run.err);
  REQUIRE(r.run.status == 1);
  CHECK(of_kind(r.events, "attempt_started").size() == 4);
  CHECK(of_kind(r.events, "retry_scheduled").size() == 2);
  auto switched = of_kind(r.events, "agent_switched");
  REQUIRE(switched.size() == 1);
  CHECK(text(switched[0], "to") == "b");
  auto done = of_kind(r.events, "task_done").at(0);
  CHECK(text(done, "outcome") == "failed");
  CHECK(done.at("exit_code").to_number<int>() == 1);
}

TEST_CASE("run: demo-crash restarts a crashed attempt in a fresh process") {
  scratch dir;
  auto r = run_example(dir, "demo-crash.json");
  INFO(r.run.out << r.run.err);
  REQUIRE(r.run.status == 0);
  auto exited = of_kind(r.events, "attempt_exited");
  REQUIRE(exited.size() == 2);
  CHECK(exited[0].at("exit_code").to_number<int>() == 137);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "container_crash");
  auto started = of_kind(r.events, "attempt_started");
  REQUIRE(started.size() == 2);
  CHECK(text(started[0], "container_id") != text(started[1], "container_id"));
  CHECK(text(of_kind(r.events, "task_done").at(0), "outcome") == "succeeded");
}

TEST_CASE("run: --events - puts JSON lines on stdout and the view on "
          "stderr") {
  scratch dir;
  auto r =
    run_to_end(dir, {"run", "--config", config_dir(), "--events", "-",
                     "--work-dir", dir / "work", example("demo-crash.json")});
  REQUIRE(r.status == 0);
  auto events = json_lines(r.out);
  REQUIRE(!events.empty());
  CHECK(kinds(events, false).size() ==
        static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n')));
  CHECK(r.err.find("task succeeded") != std::string::npos);
}

TEST_CASE("run: Ctrl-C stops the task gracefully and exits 130") {
  scratch dir;
  auto events = dir / "events.jsonl";
  tasksup_child run{dir,
                    "run",
                    {"run", "--config", config_dir(), "--events", events,
                     "--work-dir", dir / "work", example("demo-slow.json")}};
  // The agent has installed its SIGTERM trap once it prints a step.
  REQUIRE(eventually(
    [&] { return slurp(events).find("slow-agent: step") != std::string::npos; },
    20s));
  run.signal(SIGINT);
  REQUIRE(run.wait(20s) == 130);
  auto evs = json_lines(slurp(events));
  auto stops = of_kind(evs, "user_stop");
  REQUIRE(!stops.empty());
  CHECK(text(stops[0], "mode") == "cancel");
  auto done = of_kind(evs, "task_done");
  REQUIRE(done.size() == 1);
  CHECK(text(done[0], "outcome") == "stopped");
  // The agent saw SIGTERM and finished on its own terms.
  CHECK(slurp(events).find("got SIGTERM") != std::string::npos);
  CHECK(done[0].at("exit_code").to_number<int>() == 143);
}

TEST_CASE("run: a second Ctrl-C kills an agent that ignores SIGTERM") {
  scratch dir;
  auto task = dir.write("stubborn.json", R"({
    "id": "stubborn",
    "prompt": "never stop",
    "agent_selection": {"agents": [{"agent_id": "mule",
      "agent_cli": ")" + std::string{TASKSUP_FIXTURES_DIR} +
                                           R"(/stubborn-agent"}]},
    "supervisor": {"stop_grace_s": 120}
  })");
  auto events = dir / "events.jsonl";
  tasksup_child run{dir,
                    "run",
                    {"run", "--config", config_dir(), "--events", events,
                     "--work-dir", dir / "work", task}};
  REQUIRE(eventually(
    [&] {
      return slurp(events).find("stubborn-agent: ready") != std::string::npos;
    },
    20s));
  run.signal(SIGINT);
  REQUIRE(eventually(
    [&] { return !of_kind(json_lines(slurp(events)), "user_stop").empty(); },
    10s));
  // The first stop is waiting out a 120 s grace; only the kill ends it now.
  CHECK(!run.exited());
  run.signal(SIGINT);
  REQUIRE(run.wait(20s) == 130);
  auto evs = json_lines(slurp(events));
  auto stops = of_kind(evs, "user_stop");
  REQUIRE(stops.size() >= 2);
  CHECK(text(stops.back(), "mode") == "kill");
  CHECK(text(of_kind(evs, "task_done").at(0), "outcome") == "stopped");
}

TEST_CASE("run: bad input exits 2 naming the file and the JSON path, and "
          "runs nothing") {
  scratch dir;
  SECTION("a field of the wrong type") {
    auto bad = dir.write("bad.json", R"({"prompt": 42})");
    auto r = run_to_end(
      dir, {"run", "--config", config_dir(), "--work-dir", dir / "work", bad});
    CHECK(r.status == 2);
    CHECK(r.err.find(bad) != std::string::npos);
    CHECK(r.err.find("/prompt") != std::string::npos);
  }
  SECTION("not JSON") {
    auto bad = dir.write("broken.json", "{\"prompt\": \"x\",\n oops}");
    auto r = run_to_end(
      dir, {"run", "--config", config_dir(), "--work-dir", dir / "work", bad});
    CHECK(r.status == 2);
    CHECK(r.err.find(bad) != std::string::npos);
  }
  SECTION("a missing file") {
    auto r = run_to_end(dir, {"run", "--config", config_dir(), "--work-dir",
                              dir / "work", dir / "nope.json"});
    CHECK(r.status == 2);
    CHECK(r.err.find("nope.json") != std::string::npos);
  }
  SECTION("an unknown flag") {
    auto r =
      run_to_end(dir, {"run", "--frobnicate", example("demo-crash.json")});
    CHECK(r.status == 2);
  }
  CHECK(!std::filesystem::exists(dir / "work"));
}

TEST_CASE("run --help explains the command with an example") {
  scratch dir;
  auto r = run_to_end(dir, {"run", "--help"});
  CHECK(r.status == 0);
  CHECK(r.out.find("Example") != std::string::npos);
  CHECK(r.out.find("130") != std::string::npos);
  CHECK(r.out.find("TASKSUP_CONFIG_DIR") != std::string::npos);
}

namespace {

/// The image the Docker tests use (scripts/docker-setup.sh builds it).
std::string docker_test_image() {
  if (const char* env = std::getenv("TASKSUP_DOCKER_IMAGE"); env && *env)
    return env;
  std::ifstream in{TASKSUP_SOURCE_DIR "/scripts/docker-test-image"};
  std::string image;
  std::getline(in, image);
  return image.empty() ? "tasksup/busybox:test" : image;
}

/// Empty when the engine answers and holds the image, else why not.
std::string docker_problem() {
  using namespace tasksup::runtime;
  auto options = docker_options_from_environment();
  if (!options)
    return options.error().to_string();
  if (auto v = docker_engine_version(*options); !v)
    return "no Docker engine: " + v.error().to_string();
  auto present = docker_image_present(*options, docker_test_image());
  if (!present)
    return present.error().to_string();
  return *present ? "" : "image " + docker_test_image() + " missing";
}

} // namespace

TEST_CASE("run --runtime docker: attempts run in containers (a relative "
          "work directory too) and the task's exit code is the program's",
          "[docker]") {
  auto problem = docker_problem();
  const char* ci = std::getenv("CI");
  if (!problem.empty() && ci &&
      (std::string{ci} == "true" || std::string{ci} == "1"))
    FAIL("CI is set but the Docker engine is not usable: " << problem);
  if (!problem.empty()) {
    WARN("skipping: " << problem);
    return;
  }
  scratch dir;
  auto task = dir.write("dock.json", R"({"id": "dock", "prompt": "p",
    "image": ")" + docker_test_image() +
                                       R"(",
    "agent_selection": {"agents": [{"agent_id": "bb", "agent_cli": "sh",
      "cli_flags": "-c 'echo inside $TASKSUP_ATTEMPT; exit 3'"}]},
    "supervisor": {"max_retries_per_agent": 1, "backoff_base_seconds": 0.1}})");
  auto events = dir / "events.jsonl";
  // A relative work directory is mounted by its absolute path.
  auto work = fs::relative(dir / "work", fs::current_path()).string();
  REQUIRE(work.front() != '/');
  auto r = run_to_end(dir,
                      {"run", "--runtime", "docker", "--config", config_dir(),
                       "--events", events, "--work-dir", work, task},
                      120s);
  INFO(r.out << r.err);
  REQUIRE(r.status == 3);
  auto evs = json_lines(slurp(events));
  CHECK(of_kind(evs, "attempt_started").size() == 2);
  CHECK(r.out.find("inside 2") != std::string::npos);
  CHECK(text(of_kind(evs, "task_done").at(0), "outcome") == "failed");
  CHECK(slurp(dir / "work/dock/attempt-2/output.log").find("inside 2") !=
        std::string::npos);
}

namespace {

/// The first "agent-pid N" printed in the events file, once it is there.
pid_t agent_pid_in(const std::string& events) {
  pid_t pid = -1;
  REQUIRE(eventually(
    [&] {
      auto all = slurp(events);
      auto at = all.find("agent-pid ");
      if (at == std::string::npos)
        return false;
      pid = static_cast<pid_t>(std::atol(all.c_str() + at + 10));
      return pid > 0;
    },
    30s));
  return pid;
}

} // namespace

TEST_CASE("run: killed with SIGKILL mid-attempt, it leaves no agent process "
          "behind") {
  scratch dir;
  auto task = dir.write("orphan.json", R"({"id": "orphan", "prompt": "p",
    "agent_selection": {"agents": [{"agent_id": "sleeper",
      "agent_cli": "/bin/sh",
      "cli_flags": "-c 'echo agent-pid $$; sleep 300 & sleep 300; wait'"}]}})");
  auto events = dir / "events.jsonl";
  tasksup_child run{dir,
                    "run",
                    {"run", "--config", config_dir(), "--events", events,
                     "--work-dir", dir / "work", task}};
  auto agent = agent_pid_in(events);
  // The agent leads its process group; both sleeps are in it.
  REQUIRE(::kill(-agent, 0) == 0);
  run.signal(SIGKILL);
  run.wait(20s);
  CHECK(
    eventually([&] { return ::kill(-agent, 0) != 0 && errno == ESRCH; }, 20s));
}

TEST_CASE("run --runtime docker: the container of a run killed with SIGKILL "
          "is removed by the next run",
          "[docker]") {
  auto problem = docker_problem();
  if (!problem.empty()) {
    WARN("skipping: " << problem);
    return;
  }
  using namespace tasksup::runtime;
  scratch dir;
  auto task_id = "orphan-" + std::to_string(::getpid());
  auto task = dir.write("orphan.json", R"({"id": ")" + task_id +
                                         R"(", "prompt": "p", "image": ")" +
                                         docker_test_image() + R"(",
    "agent_selection": {"agents": [{"agent_id": "bb", "agent_cli": "sh",
      "cli_flags": "-c 'echo agent-pid 1; exec sleep 300'"}]}})");
  auto events = dir / "events.jsonl";
  auto options = docker_options_from_environment();
  REQUIRE(options);
  auto containers = [&] {
    auto list = list_docker_containers(*options, "tasksup.task_id=" + task_id);
    REQUIRE(list);
    return *list;
  };
  {
    tasksup_child run{dir,
                      "run",
                      {"run", "--runtime", "docker", "--config", config_dir(),
                       "--events", events, "--work-dir", dir / "work", task}};
    agent_pid_in(events);
    run.signal(SIGKILL);
    run.wait(20s);
  }
  auto left = containers();
  REQUIRE(left.size() == 1);
  CHECK(left[0].labels["tasksup.owner"] == "run");
  auto quick = dir.write("quick.json", R"({"id": "quick", "prompt": "p",
    "image": ")" + docker_test_image() + R"(",
    "agent_selection": {"agents": [{"agent_id": "bb", "agent_cli": "true"}]}})");
  auto r = run_to_end(dir,
                      {"run", "--runtime", "docker", "--config", config_dir(),
                       "--work-dir", dir / "work2", quick},
                      120s);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK(containers().empty());
  CHECK(r.out.find("left by a tasksup run that died") != std::string::npos);
}

TEST_CASE("run and validate: a docker task without an image is refused before "
          "any attempt, naming the file and the field") {
  scratch dir;
  auto task = dir.write("noimage.json", R"({"id": "noimage", "prompt": "p",
    "runtime": "docker",
    "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "true"}]}})");
  auto v = run_to_end(dir, {"validate", "--config", config_dir(), task}, 60s);
  INFO(v.out << v.err);
  CHECK(v.status != 0);
  CHECK(v.err.find(task + ": /image: ") != std::string::npos);
  // The runtime chosen on the command line has no image to offer either.
  auto plain = dir.write("plain.json", R"({"id": "plain", "prompt": "p",
    "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "true"}]}})");
  auto events = dir / "events.jsonl";
  auto r = run_to_end(dir,
                      {"run", "--runtime", "docker", "--config", config_dir(),
                       "--events", events, "--work-dir", dir / "work", plain},
                      60s);
  INFO(r.out << r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("/image") != std::string::npos);
  CHECK(slurp(events).empty());
}

TEST_CASE("run and validate: a workdir shared by every attempt is warned "
          "about") {
  scratch dir;
  std::filesystem::create_directories(dir / "wd");
  auto task = dir.write("shared.json", R"({"id": "shared", "prompt": "p",
    "workdir": ")" + (dir / "wd") +
                                         R"(",
    "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "true"}]}})");
  auto v = run_to_end(dir, {"validate", "--config", config_dir(), task}, 60s);
  INFO(v.out << v.err);
  CHECK(v.status == 0);
  CHECK(v.err.find("warning: " + task + ": /workdir: every attempt") !=
        std::string::npos);
  auto events = dir / "events.jsonl";
  auto r = run_to_end(dir,
                      {"run", "--config", config_dir(), "--events", events,
                       "--work-dir", dir / "work", task},
                      60s);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  auto warnings = of_kind(json_lines(slurp(events)), "warning");
  REQUIRE(warnings.size() == 1);
  CHECK(text(warnings[0], "message").find("/workdir: every attempt") !=
        std::string::npos);
}

TEST_CASE("run: an agent that asks a question is needs_input and not retried") {
  // The agent prints "Continue? [y/N]" and reads stdin, which tasksup
  // closes: asking again would fail the same way, so the task falls back to
  // the next agent at once instead of spending retries.
  scratch dir;
  auto task = dir.write("asks.json", R"({
    "id": "asks",
    "prompt": "Rewrite the parser",
    "agent_selection": {
      "agents": [
        {"agent_id": "asker", "agent_cli": ")" TASKSUP_FIXTURES_DIR
                                     R"(/asks_question.sh"},
        {"agent_id": "backup", "agent_cli": "/bin/true"}
      ],
      "agent_fallbacks": {"asker": "backup"}
    },
    "supervisor": {"max_retries_per_agent": 3, "backoff_base_seconds": 0.1}
  })");
  auto events = dir / "asks.jsonl";
  auto run = run_to_end(dir, {"run", "--config", config_dir(), "--events",
                              events, "--work-dir", dir / "work", task});
  INFO(run.out << run.err);
  REQUIRE(run.status == 0);
  auto evs = json_lines(slurp(events));
  auto classified = of_kind(evs, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "needs_input");
  CHECK(text(classified[0], "rule") == "needs_input");
  // The question (printed last, without a newline) or Python's EOFError.
  auto line = text(classified[0], "line");
  CHECK((line.find("[y/N]") != std::string::npos ||
         line.find("EOF when reading a line") != std::string::npos));
  CHECK(of_kind(evs, "retry_scheduled").empty());
  auto switched = of_kind(evs, "agent_switched");
  REQUIRE(switched.size() == 1);
  CHECK(text(switched[0], "to") == "backup");
  CHECK(of_kind(evs, "attempt_started").size() == 2);
}

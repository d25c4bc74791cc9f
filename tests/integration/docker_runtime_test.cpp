// Runs real containers on the local Docker Engine from the image that
// scripts/docker-setup.sh imports. Without an engine the tests skip with a
// warning, unless CI is set: then a missing engine is a failure.

#include "supervisor/runtime/docker_runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

using namespace std::chrono_literals;
using namespace tasksup;
using namespace tasksup::runtime;
namespace fs = std::filesystem;

/// Generous bound on any one attempt; never reached when things work.
constexpr auto attempt_bound = 180s;

std::string test_image() {
  if (const char* env = std::getenv("TASKSUP_DOCKER_IMAGE"); env && *env)
    return env;
  std::ifstream in{TASKSUP_SOURCE_DIR "/scripts/docker-test-image"};
  std::string line;
  std::getline(in, line);
  return line;
}

bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string{ci} == "true" || std::string{ci} == "1");
}

docker_runtime_options engine_options() {
  auto options = docker_options_from_environment();
  REQUIRE(options.has_value());
  return *options;
}

/// Empty when the engine answers and holds the test image, else why not.
std::string engine_problem() {
  auto options = docker_options_from_environment();
  if (!options)
    return options.error().to_string();
  auto version = docker_engine_version(*options);
  if (!version)
    return "no Docker engine: " + version.error().to_string();
  auto present = docker_image_present(*options, test_image());
  if (!present)
    return present.error().to_string();
  if (!*present)
    return "image " + test_image() + " missing; run scripts/docker-setup.sh";
  return {};
}

/// True when the engine tests can run; skips with a warning otherwise, or
/// fails under CI.
bool engine_ready() {
  static const std::string problem = engine_problem();
  if (problem.empty())
    return true;
  if (under_ci())
    FAIL("CI is set but the Docker engine is not usable: " << problem);
  WARN("skipping Docker runtime test: " << problem);
  return false;
}

/// A fresh host directory for one test, removed afterwards.
class temp_dir {
public:
  temp_dir() {
    std::string pattern =
      (fs::temp_directory_path() / "tasksup-docker-test.XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }

  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }

  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

/// A task id unique to this process and call, so parallel test processes
/// never see each other's containers.
std::string unique_task_id(const std::string& what) {
  static int counter = 0;
  return "dockertest-" + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(++counter);
}

/// Collects one attempt's lines and outcome; waits with a condition
/// variable.
class recorder {
public:
  attempt_callbacks callbacks() {
    attempt_callbacks cb;
    cb.on_line = [this](std::string_view line) {
      std::lock_guard<std::mutex> guard{mtx_};
      lines_.emplace_back(line);
      cv_.notify_all();
    };
    cb.on_exit = [this](attempt_outcome outcome) {
      std::lock_guard<std::mutex> guard{mtx_};
      ++exits_;
      exit_thread_ = std::this_thread::get_id();
      outcome_ = std::move(outcome);
      cv_.notify_all();
    };
    return cb;
  }

  attempt_outcome wait() {
    std::unique_lock<std::mutex> lock{mtx_};
    REQUIRE(cv_.wait_for(lock, attempt_bound, [this] { return exits_ > 0; }));
    return *outcome_;
  }

  /// Waits until some line equals `text` (the attempt announces a state).
  void wait_for_line(const std::string& text) {
    std::unique_lock<std::mutex> lock{mtx_};
    REQUIRE(cv_.wait_for(lock, attempt_bound, [&] {
      return exits_ > 0 ||
             std::find(lines_.begin(), lines_.end(), text) != lines_.end();
    }));
    REQUIRE(exits_ == 0);
  }

  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return lines_;
  }

  int exits() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return exits_;
  }

  std::thread::id exit_thread() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return exit_thread_;
  }

private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  std::optional<attempt_outcome> outcome_;
  int exits_ = 0;
  std::thread::id exit_thread_;
};

attempt_spec make_spec(const fs::path& root, const std::string& task_id,
                       std::vector<std::string> argv) {
  attempt_spec spec;
  spec.task_id = task_id;
  spec.attempt = 1;
  spec.agent_id = "busybox";
  spec.argv = std::move(argv);
  spec.attempt_dir = (root / task_id / "attempt-1").string();
  spec.image = test_image();
  return spec;
}

attempt_spec shell_spec(const fs::path& root, const std::string& task_id,
                        const std::string& script) {
  return make_spec(root, task_id, {"sh", "-c", script});
}

std::vector<docker_container_summary>
containers_of(const std::string& task_id) {
  auto list =
    list_docker_containers(engine_options(), "tasksup.task_id=" + task_id);
  REQUIRE(list.has_value());
  return *list;
}

/// Runs one attempt to its end and checks that its container is gone.
attempt_outcome run_to_end(container_runtime& rt, attempt_spec spec,
                           recorder& rec) {
  auto task_id = spec.task_id;
  rt.start(std::move(spec), rec.callbacks());
  auto outcome = rec.wait();
  CHECK(containers_of(task_id).empty());
  return outcome;
}

bool contains(const std::vector<std::string>& lines, const std::string& text) {
  return std::find(lines.begin(), lines.end(), text) != lines.end();
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return text;
}

} // namespace

TEST_CASE("docker: exit codes and failure output reach the outcome",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  REQUIRE(rt->name() == "docker");

  SECTION("exit 0 succeeds") {
    recorder rec;
    auto out = run_to_end(
      *rt, shell_spec(tmp.path(), unique_task_id("ok"), "echo hello; exit 0"),
      rec);
    CHECK(out.succeeded());
    CHECK(out.infrastructure_error.empty());
    CHECK(out.tail == std::vector<std::string>{"hello"});
    CHECK(out.duration_s > 0);
    CHECK(rec.exits() == 1);
  }
  SECTION("a non-zero exit code is reported as it is") {
    recorder rec;
    auto out = run_to_end(
      *rt, shell_spec(tmp.path(), unique_task_id("exit3"), "exit 3"), rec);
    CHECK(out.exit_code == 3);
    CHECK(out.signal == 0);
    CHECK_FALSE(out.oom_killed);
    CHECK(out.infrastructure_error.empty());
  }
  SECTION("a rate-limit message on stderr is in the tail") {
    recorder rec;
    auto out = run_to_end(
      *rt,
      shell_spec(tmp.path(), unique_task_id("rate"),
                 "echo working; echo 'Error: 429 Too Many Requests' >&2; "
                 "exit 1"),
      rec);
    CHECK(out.exit_code == 1);
    CHECK(contains(out.tail, "Error: 429 Too Many Requests"));
  }
  SECTION("an authentication failure is in the tail") {
    recorder rec;
    auto out = run_to_end(
      *rt,
      shell_spec(tmp.path(), unique_task_id("fatal"),
                 "echo 'authentication failed: invalid api key' >&2; exit 2"),
      rec);
    CHECK(out.exit_code == 2);
    CHECK(contains(out.tail, "authentication failed: invalid api key"));
    CHECK(out.infrastructure_error.empty());
  }
  SECTION("a missing agent binary exits 127 and says so") {
    recorder rec;
    auto out = run_to_end(*rt,
                          make_spec(tmp.path(), unique_task_id("missing"),
                                    {"/opt/no-such-agent", "--flag"}),
                          rec);
    CHECK(out.exit_code == 127);
    CHECK(out.infrastructure_error.empty());
    bool explained = std::any_of(
      out.tail.begin(), out.tail.end(), [](const std::string& line) {
        auto l = lower(line);
        return l.find("no such file") != std::string::npos ||
               l.find("not found") != std::string::npos;
      });
    CHECK(explained);
  }
}

TEST_CASE("docker: exceeding the memory limit is a real OOM kill", "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto spec = shell_spec(tmp.path(), unique_task_id("oom"),
                         "x=a; while true; do x=$x$x; done");
  spec.memory_limit_mb = 16;
  auto out = run_to_end(*rt, std::move(spec), rec);
  CHECK(out.oom_killed);
  CHECK(out.exit_code == 137);
  CHECK(out.signal == 9);
  CHECK(out.infrastructure_error.empty());
  CHECK_FALSE(out.succeeded());
}

TEST_CASE("docker: stop is graceful, kill is immediate", "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  // Traps TERM and exits 42; ignores nothing else.
  const std::string trapping =
    "trap 'echo got-term; exit 42' TERM; echo ready; "
    "while true; do sleep 1; done";

  SECTION("stop delivers SIGTERM and the agent's own exit code wins") {
    recorder rec;
    auto task_id = unique_task_id("stop");
    auto handle =
      rt->start(shell_spec(tmp.path(), task_id, trapping), rec.callbacks());
    rec.wait_for_line("ready");
    CHECK_FALSE(handle->id().empty());
    handle->stop(60s);
    auto out = rec.wait();
    CHECK(out.exit_code == 42);
    CHECK(contains(rec.lines(), "got-term"));
    // Well inside the grace period: the TERM was handled, not timed out.
    CHECK(out.duration_s < 30);
    CHECK(containers_of(task_id).empty());
  }
  SECTION("stop on an agent without a handler ends it with SIGTERM") {
    recorder rec;
    auto task_id = unique_task_id("stopplain");
    auto handle =
      rt->start(shell_spec(tmp.path(), task_id, "echo ready; exec sleep 600"),
                rec.callbacks());
    rec.wait_for_line("ready");
    handle->stop(60s);
    auto out = rec.wait();
    CHECK(out.exit_code == 143);
    CHECK(out.signal == 15);
    CHECK(out.duration_s < 30);
    CHECK(containers_of(task_id).empty());
  }
  SECTION("kill ends it at once with 137 although TERM is trapped") {
    recorder rec;
    auto task_id = unique_task_id("kill");
    auto handle =
      rt->start(shell_spec(tmp.path(), task_id, trapping), rec.callbacks());
    rec.wait_for_line("ready");
    handle->kill();
    auto out = rec.wait();
    CHECK(out.exit_code == 137);
    CHECK(out.signal == 9);
    CHECK_FALSE(contains(rec.lines(), "got-term"));
    CHECK(containers_of(task_id).empty());
    // After the end, control calls do nothing.
    handle->kill();
    handle->stop(1s);
    CHECK(rec.exits() == 1);
  }
  SECTION("a kill before the container exists is applied: it never runs") {
    recorder rec;
    auto task_id = unique_task_id("earlykill");
    auto spec =
      shell_spec(tmp.path(), task_id, "touch /workspace/ran; echo ran");
    auto workspace = fs::path{spec.attempt_dir} / "workspace";
    auto handle = rt->start(std::move(spec), rec.callbacks());
    handle->kill();
    auto out = rec.wait();
    CHECK(out.exit_code == 137);
    CHECK(out.signal == 9);
    CHECK(out.infrastructure_error.empty());
    CHECK_FALSE(fs::exists(workspace / "ran"));
    CHECK(rec.lines().empty());
    CHECK(containers_of(task_id).empty());
  }
}

TEST_CASE("docker: containers carry the task's labels while they run",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto task_id = unique_task_id("labels");
  auto spec = shell_spec(tmp.path(), task_id, "echo ready; exec sleep 600");
  spec.attempt = 3;
  spec.agent_id = "agent-x";
  spec.labels["org.example.team"] = "a";
  auto handle = rt->start(std::move(spec), rec.callbacks());
  rec.wait_for_line("ready");
  auto running = containers_of(task_id);
  REQUIRE(running.size() == 1);
  CHECK(running[0].id == handle->id());
  CHECK(running[0].labels["tasksup.task_id"] == task_id);
  CHECK(running[0].labels["tasksup.attempt"] == "3");
  CHECK(running[0].labels["tasksup.agent_id"] == "agent-x");
  CHECK(running[0].labels["org.example.team"] == "a");
  handle->kill();
  rec.wait();
  CHECK(containers_of(task_id).empty());
}

TEST_CASE("docker: environment, working directory and config dir", "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto config = tmp.path() / "agent-config";
  fs::create_directories(config);
  std::ofstream{config / "settings"} << "model=x\n";
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto task_id = unique_task_id("env");
  auto spec = shell_spec(
    tmp.path(), task_id,
    "echo \"FOO=$FOO\"; echo \"TID=$TASKSUP_TASK_ID\"; "
    "echo \"ATT=$TASKSUP_ATTEMPT\"; echo \"ART=$TASKSUP_ARTIFACTS_DIR\"; "
    "echo \"CFG=$TASKSUP_AGENT_CONFIG_DIR\"; echo \"PWD=$(pwd)\"; "
    "cat \"$TASKSUP_AGENT_CONFIG_DIR/settings\"; "
    "if touch \"$TASKSUP_AGENT_CONFIG_DIR/new\" 2>/dev/null; "
    "then echo config-writable; else echo config-read-only; fi");
  spec.attempt = 2;
  spec.env["FOO"] = "bar baz";
  spec.config_dir = config.string();
  auto out = run_to_end(*rt, std::move(spec), rec);
  CHECK(out.exit_code == 0);
  auto lines = rec.lines();
  CHECK(contains(lines, "FOO=bar baz"));
  CHECK(contains(lines, "TID=" + task_id));
  CHECK(contains(lines, "ATT=2"));
  CHECK(contains(lines, "ART=/tasksup/artifacts"));
  CHECK(contains(lines, "CFG=" + config.string()));
  CHECK(contains(lines, "PWD=/workspace"));
  CHECK(contains(lines, "model=x"));
  CHECK(contains(lines, "config-read-only"));
  CHECK_FALSE(fs::exists(config / "new"));
}

TEST_CASE("docker: artifacts and workspace files come back to the host",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto spec = shell_spec(tmp.path(), unique_task_id("artifacts"),
                         "echo one > \"$TASKSUP_ARTIFACTS_DIR/a.txt\"; "
                         "mkdir -p \"$TASKSUP_ARTIFACTS_DIR/sub\"; "
                         "echo two > \"$TASKSUP_ARTIFACTS_DIR/sub/b.txt\"; "
                         "ln -s /etc/passwd \"$TASKSUP_ARTIFACTS_DIR/link\"; "
                         "echo patched > /workspace/result.diff");
  auto dir = fs::path{spec.attempt_dir};
  auto out = run_to_end(*rt, std::move(spec), rec);
  CHECK(out.exit_code == 0);
  std::vector<std::string> expected{(dir / "artifacts/a.txt").string(),
                                    (dir / "artifacts/sub/b.txt").string()};
  CHECK(out.artifacts == expected);
  std::ifstream artifact{dir / "artifacts/sub/b.txt"};
  std::string text;
  std::getline(artifact, text);
  CHECK(text == "two");
  CHECK(fs::exists(dir / "workspace/result.diff"));
}

TEST_CASE("docker: long lines arrive in bounded pieces and the log keeps "
          "every byte",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto options = engine_options();
  options.output_limits.max_piece_bytes = 1000;
  auto rt = make_docker_runtime(options);
  recorder rec;
  // stdout only: the engine copies stdout and stderr separately, so their
  // relative order inside one line is not defined.
  auto out =
    run_to_end(*rt,
               shell_spec(tmp.path(), unique_task_id("long"),
                          "head -c 250000 /dev/zero | tr '\\0' x; echo; "
                          "printf 'no newline at end'"),
               rec);
  CHECK(out.exit_code == 0);
  auto lines = rec.lines();
  REQUIRE(lines.size() == 251);
  for (std::size_t i = 0; i < 250; ++i)
    CHECK(lines[i] == std::string(1000, 'x'));
  CHECK(lines[250] == "no newline at end");
  CHECK(out.tail.back() == "no newline at end");
  REQUIRE_FALSE(out.log_path.empty());
  CHECK(fs::file_size(out.log_path) ==
        250000 + 1 + std::string{"no newline at end"}.size());
}

TEST_CASE("docker: a missing image is a clear infrastructure error",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto spec = shell_spec(tmp.path(), unique_task_id("noimage"), "true");
  spec.image = "tasksup/no-such-image:never";
  auto out = run_to_end(*rt, std::move(spec), rec);
  CHECK_FALSE(out.succeeded());
  CHECK_THAT(out.infrastructure_error,
             Catch::Contains("image tasksup/no-such-image:never not found "
                             "locally (tasksup never pulls)"));
}

TEST_CASE("docker: an unreachable engine is an infrastructure error",
          "[docker]") {
  temp_dir tmp;
  auto socket = tmp.path() / "no-engine.sock";
  const char* saved = std::getenv("DOCKER_HOST");
  std::optional<std::string> previous;
  if (saved)
    previous = saved;
  ::setenv("DOCKER_HOST", ("unix://" + socket.string()).c_str(), 1);
  auto options = docker_options_from_environment();
  ::setenv("DOCKER_HOST", "tcp://127.0.0.1:2375", 1);
  auto tcp = docker_options_from_environment();
  if (previous)
    ::setenv("DOCKER_HOST", previous->c_str(), 1);
  else
    ::unsetenv("DOCKER_HOST");
  REQUIRE(options.has_value());
  CHECK(options->socket_path == socket.string());
  REQUIRE_FALSE(tcp.has_value());
  CHECK_THAT(tcp.error().to_string(), Catch::Contains("DOCKER_HOST"));

  auto rt = make_docker_runtime(*options);
  recorder rec;
  auto spec = shell_spec(tmp.path(), "unreachable", "true");
  rt->start(std::move(spec), rec.callbacks());
  auto out = rec.wait();
  CHECK_FALSE(out.succeeded());
  CHECK_THAT(out.infrastructure_error,
             Catch::Contains("cannot connect to the Docker engine at " +
                             socket.string()));
  CHECK_FALSE(docker_engine_version(*options).has_value());
}

TEST_CASE("docker: one I/O thread serves many concurrent attempts",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  constexpr int n = 8;
  std::vector<recorder> recs(n);
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(unique_task_id("many"));
    rt->start(shell_spec(tmp.path(), ids.back(),
                         "echo started-" + std::to_string(i) + "; exit " +
                           std::to_string(i)),
              recs[static_cast<std::size_t>(i)].callbacks());
  }
  std::set<std::thread::id> threads;
  for (int i = 0; i < n; ++i) {
    auto& rec = recs[static_cast<std::size_t>(i)];
    auto out = rec.wait();
    CHECK(out.exit_code == i);
    CHECK(out.tail == std::vector<std::string>{"started-" + std::to_string(i)});
    threads.insert(rec.exit_thread());
  }
  CHECK(threads.size() == 1);
  CHECK(threads.count(std::this_thread::get_id()) == 0);
  for (auto& id : ids)
    CHECK(containers_of(id).empty());
}

TEST_CASE("docker: destroying the runtime kills and removes its containers",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto task_id = unique_task_id("shutdown");
  rt->start(shell_spec(tmp.path(), task_id, "echo ready; exec sleep 600"),
            rec.callbacks());
  rec.wait_for_line("ready");
  REQUIRE(containers_of(task_id).size() == 1);
  rt.reset();
  // The destructor joined the I/O thread: the outcome is already there.
  REQUIRE(rec.exits() == 1);
  auto out = rec.wait();
  CHECK_THAT(out.infrastructure_error, Catch::Contains("shut down"));
  CHECK(containers_of(task_id).empty());
}

// Runs real containers on the local Docker Engine from the image that
// scripts/docker-setup.sh imports. Without an engine the tests skip with a
// warning, unless CI is set: then a missing engine is a failure.

#include "tasksup/runtime/docker_runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
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
    cb.on_line = [this](tasksup::runtime::output_stream stream,
                        std::string_view line) {
      std::lock_guard<std::mutex> guard{mtx_};
      lines_.emplace_back(line);
      streams_.push_back(stream);
      cv_.notify_all();
      return true;
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

  /// Starts `spec` on `rt` and waits for its outcome.
  attempt_outcome wait_outcome_of(container_runtime& rt, attempt_spec spec) {
    rt.start(std::move(spec), callbacks());
    return wait();
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

  /// The stream of each line in `lines()`.
  std::vector<tasksup::runtime::output_stream> streams() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return streams_;
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
  std::vector<tasksup::runtime::output_stream> streams_;
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

/// One request as the fake engine saw it.
struct fake_request {
  std::string method;
  std::string target;
  std::string body;
};

/// A stand-in for the Docker engine on a unix socket, answering each
/// request with whatever the test's `respond` returns and then closing the
/// connection. Serves connections one after another on its own thread, so
/// its answers must not wait for later requests.
class fake_engine {
public:
  using responder = std::function<std::string(const fake_request&)>;

  fake_engine(const fs::path& socket_path, responder respond)
    : path_(socket_path), respond_(std::move(respond)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    auto path = path_.string();
    REQUIRE(path.size() < sizeof(addr.sun_path));
    std::copy(path.begin(), path.end(), addr.sun_path);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    thread_ = std::thread{[this] { serve(); }};
  }

  ~fake_engine() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  docker_runtime_options options() const {
    docker_runtime_options opts;
    opts.socket_path = path_.string();
    return opts;
  }

  std::vector<fake_request> requests() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return requests_;
  }

private:
  void serve() {
    while (!stop_) {
      pollfd pfd{fd_, POLLIN, 0};
      // Bounded poll so the destructor's stop flag is seen promptly.
      if (::poll(&pfd, 1, 50) <= 0)
        continue;
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0)
        continue;
      handle(conn);
      ::close(conn);
    }
  }

  void handle(int conn) {
    std::string data;
    char buf[4096];
    std::size_t header_end = std::string::npos;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      auto n = ::read(conn, buf, sizeof(buf));
      if (n <= 0)
        return;
      data.append(buf, static_cast<std::size_t>(n));
    }
    fake_request req;
    auto first_line = data.substr(0, data.find("\r\n"));
    auto sp1 = first_line.find(' ');
    auto sp2 = first_line.find(' ', sp1 + 1);
    req.method = first_line.substr(0, sp1);
    req.target = first_line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::size_t length = 0;
    auto headers = lower(data.substr(0, header_end));
    if (auto pos = headers.find("content-length:"); pos != std::string::npos)
      length = std::stoul(headers.substr(pos + 15));
    req.body = data.substr(header_end + 4);
    while (req.body.size() < length) {
      auto n = ::read(conn, buf, sizeof(buf));
      if (n <= 0)
        return;
      req.body.append(buf, static_cast<std::size_t>(n));
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      requests_.push_back(req);
    }
    auto answer = respond_(req);
    std::size_t sent = 0;
    while (sent < answer.size()) {
      auto n =
        ::send(conn, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        return;
      sent += static_cast<std::size_t>(n);
    }
  }

  fs::path path_;
  responder respond_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mtx_;
  std::vector<fake_request> requests_;
};

std::string http_answer(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

/// A stdout frame of the engine's multiplexed stream.
std::string stdout_frame(const std::string& payload) {
  std::string out{'\1', '\0', '\0', '\0'};
  auto n = static_cast<std::uint32_t>(payload.size());
  for (int shift : {24, 16, 8, 0})
    out += static_cast<char>((n >> shift) & 0xff);
  return out + payload;
}

const std::string fake_id(64, 'a');

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

/// Answers like a healthy engine whose container printed `output` and
/// exited 0; `override` may answer a request differently (non-empty).
std::string healthy_answer(
  const fake_request& req, const std::string& output,
  const std::function<std::string(const fake_request&)>& override) {
  if (auto special = override(req); !special.empty())
    return special;
  auto base = "/v1.41/containers/";
  if (starts_with(req.target, "/v1.41/containers/create"))
    return http_answer(201, R"({"Id":")" + fake_id + R"(","Warnings":[]})");
  if (req.target.find("/attach?") != std::string::npos)
    return "HTTP/1.1 101 UPGRADED\r\nContent-Type: "
           "application/vnd.docker.raw-stream\r\nConnection: "
           "Upgrade\r\nUpgrade: tcp\r\n\r\n" +
           stdout_frame(output);
  if (req.target == base + fake_id + "/start")
    return http_answer(204, "");
  if (req.target == base + fake_id + "/wait")
    return http_answer(200, R"({"StatusCode":0})");
  if (req.target == base + fake_id + "/json")
    return http_answer(200, R"({"State":{"ExitCode":0,"OOMKilled":false}})");
  if (req.method == "DELETE")
    return http_answer(204, "");
  return http_answer(404, R"({"message":"unexpected request"})");
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

TEST_CASE("docker: without an init, a missing agent still exits 127",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto options = engine_options();
  // The engine itself then fails to exec the command at start.
  options.init = false;
  auto rt = make_docker_runtime(options);
  recorder rec;
  auto task_id = unique_task_id("noinit");
  auto out = run_to_end(
    *rt, make_spec(tmp.path(), task_id, {"/opt/no-such-agent"}), rec);
  CHECK(out.exit_code == 127);
  CHECK(out.infrastructure_error.empty());
  REQUIRE_FALSE(out.tail.empty());
  CHECK_THAT(lower(out.tail.back()), Catch::Contains("no such file"));
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

namespace {

/// Where the docker runtime keeps containers' memory limits when the engine
/// lets it: `tasksup-docker` below this process's memory cgroup.
fs::path docker_memory_home() {
  std::ifstream in{"/proc/self/cgroup"};
  std::string line;
  std::string v2;
  while (std::getline(in, line)) {
    if (auto pos = line.find(":memory:"); pos != std::string::npos) {
      auto own = line.substr(pos + 8);
      return fs::path{"/sys/fs/cgroup/memory" + (own == "/" ? "" : own)} /
             "tasksup-docker";
    }
    if (line.rfind("0::", 0) == 0)
      v2 = line.substr(3) == "/" ? "" : line.substr(3);
  }
  return fs::path{"/sys/fs/cgroup" + v2} / "tasksup-docker";
}

/// The cgroups below `home` made for the attempts of `task_id`.
std::vector<fs::path> attempt_cgroups(const fs::path& home,
                                      const std::string& task_id) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it{home, ec};
       !ec && it != fs::directory_iterator{}; it.increment(ec))
    if (it->is_directory() && it->path().filename().string().rfind(
                                "tasksup-" + task_id + "-", 0) == 0)
      out.push_back(it->path());
  return out;
}

std::string first_word(const fs::path& file) {
  std::ifstream in{file};
  std::string word;
  in >> word;
  return word;
}

} // namespace

TEST_CASE("docker: a memory limit is kept on a cgroup of tasksup's own: an "
          "OOM kill at once is seen, and the cgroup goes with the container",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  auto home = docker_memory_home();
  auto task_id = unique_task_id("memhome");
  recorder rec;
  auto spec = shell_spec(tmp.path(), task_id, "echo up; sleep 60");
  spec.memory_limit_mb = 64;
  auto handle = rt->start(std::move(spec), rec.callbacks());
  rec.wait_for_line("up");
  auto dirs = attempt_cgroups(home, task_id);
  if (dirs.empty()) {
    // The engine runs elsewhere, with the systemd driver, or no memory
    // controller is writable here: the container holds its own limit.
    WARN("the engine keeps the memory limit itself here (no "
         << home.string() << "/tasksup-" << task_id << "-*)");
    handle->kill();
    rec.wait();
    return;
  }
  REQUIRE(dirs.size() == 1);
  auto limit = fs::exists(dirs[0] / "memory.limit_in_bytes")
                 ? first_word(dirs[0] / "memory.limit_in_bytes")
                 : first_word(dirs[0] / "memory.max");
  CHECK(limit == std::to_string(64 * 1024 * 1024));
  handle->kill();
  auto killed = rec.wait();
  CHECK(killed.exit_code == 137);
  CHECK_FALSE(killed.oom_killed);
  CHECK(attempt_cgroups(home, task_id).empty());

  // Programs that exceed their limit within milliseconds: the engine learns
  // of an OOM kill from a watch containerd's shim sets after the start, and
  // under load missed such kills (exit 137, OOMKilled false); the parent
  // cgroup's watch exists before the container does.
  for (int i = 0; i < 5; ++i) {
    recorder r;
    auto fast = shell_spec(tmp.path(), task_id + "-f" + std::to_string(i),
                           "x=a; while true; do x=$x$x; done");
    fast.memory_limit_mb = 16;
    auto out = run_to_end(*rt, std::move(fast), r);
    CHECK(out.oom_killed);
    CHECK(out.exit_code == 137);
    CHECK(attempt_cgroups(home, task_id + "-f" + std::to_string(i)).empty());
  }
  // Nor is anything left in the other hierarchies (cgroup v1).
  auto own = home.parent_path().string();
  auto rel = own.substr(std::string{"/sys/fs/cgroup/memory"}.size());
  if (own.rfind("/sys/fs/cgroup/memory", 0) == 0)
    CHECK(attempt_cgroups(
            fs::path{"/sys/fs/cgroup/pids" + rel} / "tasksup-docker", task_id)
            .empty());
}

TEST_CASE("docker: reap removes an owner's containers but those being "
          "adopted, kept by container id or by task and attempt labels",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto options = engine_options();
  options.owner = "reap-test-" + std::to_string(::getpid());
  auto rt = make_docker_runtime(options);
  std::array<recorder, 3> recs;
  std::vector<std::shared_ptr<tasksup::runtime::attempt_handle>> handles;
  std::vector<std::string> tasks;
  for (auto& rec : recs) {
    tasks.push_back(unique_task_id("reap"));
    handles.push_back(
      rt->start(shell_spec(tmp.path(), tasks.back(), "echo up; sleep 60"),
                rec.callbacks()));
    rec.wait_for_line("up");
  }
  tasksup::runtime::reap_spec spec;
  spec.owner = options.owner;
  // The first is kept by its container id; the second, whose id a restarted
  // node did not have, by its task and attempt.
  spec.keep.insert(handles[0]->id());
  spec.keep_attempts.emplace(tasks[1], 1);
  auto report = rt->reap(spec);
  CHECK(report.errors.empty());
  REQUIRE(report.reaped.size() == 1);
  CHECK_THAT(report.reaped[0], Catch::Contains(tasks[2]));
  CHECK(containers_of(tasks[0]).size() == 1);
  CHECK(containers_of(tasks[1]).size() == 1);
  CHECK(containers_of(tasks[2]).empty());
  // The reaped attempt ends; the kept ones run until killed.
  recs[2].wait();
  CHECK(recs[0].exits() == 0);
  CHECK(recs[1].exits() == 0);
  for (int i = 0; i < 2; ++i) {
    handles[i]->kill();
    recs[i].wait();
    CHECK(containers_of(tasks[i]).empty());
  }
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
  // Named at once (attempt_started is emitted before the engine answers),
  // by the name the container is created with.
  auto early_id = handle->id();
  CHECK(early_id.rfind("tasksup-" + task_id + "-3-", 0) == 0);
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

TEST_CASE("docker: environment (with the done file and feedback), working "
          "directory and config dir",
          "[docker]") {
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
    "then echo config-writable; else echo config-read-only; fi; "
    "touch \"$TASKSUP_DONE_FILE\"; echo \"FB=$TASKSUP_FEEDBACK\"; "
    "echo \"FBTEXT=$(cat \"$TASKSUP_FEEDBACK\")\"");
  spec.attempt = 2;
  auto attempt_dir = spec.attempt_dir;
  spec.env["FOO"] = "bar baz";
  spec.feedback = "attempt: 1 failed";
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
  // The done file the agent created is where the node looks on the host.
  CHECK(fs::exists(attempt_dir + "/artifacts/tasksup-done"));
  // The feedback the runtime wrote, mounted where the variable says.
  CHECK(contains(lines, "FB=/tasksup/feedback.txt"));
  CHECK(contains(lines, "FBTEXT=attempt: 1 failed"));
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
  // No delivery limits: every piece arrives.
  options.output_limits.line_bytes = 0;
  options.output_limits.attempt_bytes = 0;
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

TEST_CASE("docker: stdout and stderr lines keep their stream", "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  auto out = run_to_end(*rt,
                        shell_spec(tmp.path(), unique_task_id("streams"),
                                   "echo 'to stdout'; echo 'to stderr' >&2"),
                        rec);
  CHECK(out.exit_code == 0);
  auto lines = rec.lines();
  auto streams = rec.streams();
  REQUIRE(lines.size() == 2);
  REQUIRE(streams.size() == 2);
  for (std::size_t i = 0; i < lines.size(); ++i)
    CHECK(streams[i] == (lines[i] == "to stderr"
                           ? tasksup::runtime::output_stream::err
                           : tasksup::runtime::output_stream::out));
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
  // It never ran, and starting it again cannot help: the supervisor gives
  // the agent up at once instead of retrying.
  CHECK_FALSE(out.started);
  CHECK(out.retry_futile);
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

TEST_CASE("docker: a healthy fake engine sees the full request sequence",
          "[docker][fake-engine]") {
  temp_dir tmp;
  fake_engine engine{tmp.path() / "engine.sock", [](const fake_request& req) {
                       return healthy_answer(
                         req, "hi\n",
                         [](const fake_request&) { return std::string{}; });
                     }};
  auto rt = make_docker_runtime(engine.options());
  recorder rec;
  auto out =
    rec.wait_outcome_of(*rt, shell_spec(tmp.path(), "fake-ok", "echo hi"));
  CHECK(out.succeeded());
  CHECK(out.tail == std::vector<std::string>{"hi"});
  auto requests = engine.requests();
  std::vector<std::string> seen;
  for (auto& req : requests)
    seen.push_back(req.method + " " +
                   req.target.substr(0, req.target.find("?name=")));
  auto path = "/v1.41/containers/" + fake_id;
  std::vector<std::string> expected{"POST /v1.41/containers/create",
                                    "POST " + path +
                                      "/attach?stream=1&stdout=1&stderr=1",
                                    "POST " + path + "/start",
                                    "POST " + path + "/wait",
                                    "GET " + path + "/json",
                                    "DELETE " + path + "?force=1&v=1"};
  CHECK(seen == expected);
  // Named after the task, so `docker ps` shows what runs.
  CHECK_THAT(
    requests.front().target,
    Catch::StartsWith("/v1.41/containers/create?name=tasksup-fake-ok-1-"));
  CHECK_THAT(requests.front().body,
             Catch::Contains(R"("Cmd":["sh","-c","echo hi"])"));
}

TEST_CASE("docker: a failing or lying engine ends the attempt as an "
          "infrastructure error",
          "[docker][fake-engine]") {
  temp_dir tmp;
  auto path = "/v1.41/containers/" + fake_id;
  std::function<std::string(const fake_request&)> override;
  std::string output = "hello\n";
  std::string expected_error;
  docker_runtime_options extra;
  SECTION("start refused") {
    override = [&](const fake_request& req) {
      return req.target == path + "/start"
               ? http_answer(500, R"({"message":"cgroup trouble"})")
               : std::string{};
    };
    expected_error = "docker start failed: cgroup trouble (HTTP 500)";
  }
  SECTION("engine lost while waiting") {
    override = [&](const fake_request& req) {
      // Closing without an answer is what a crashing engine does.
      return req.target == path + "/wait" ? std::string{"HTTP/1.1 "}
                                          : std::string{};
    };
    expected_error = "lost the Docker engine while waiting";
  }
  SECTION("create answers with bad JSON") {
    override = [&](const fake_request& req) {
      return starts_with(req.target, "/v1.41/containers/create")
               ? http_answer(201, "{\"Id\": [")
               : std::string{};
    };
    expected_error = "invalid JSON";
  }
  SECTION("create refused for a reason other than the image") {
    override = [&](const fake_request& req) {
      return starts_with(req.target, "/v1.41/containers/create")
               ? http_answer(404, R"({"message":"network agents not found"})")
               : std::string{};
    };
    expected_error = "docker create failed: network agents not found (HTTP "
                     "404)";
  }
  SECTION("inspect answer larger than the limit") {
    extra.max_response_bytes = 64 * 1024;
    override = [&](const fake_request& req) {
      return req.target == path + "/json"
               ? http_answer(200, std::string(200 * 1024, ' '))
               : std::string{};
    };
    expected_error = "larger than 65536 bytes";
  }
  SECTION("output stream that is not multiplexed") {
    override = [&](const fake_request& req) {
      return req.target.find("/attach?") != std::string::npos
               ? std::string{"HTTP/1.1 101 UPGRADED\r\n\r\nraw tty text\n"}
               : std::string{};
    };
    expected_error = "malformed log stream";
  }
  fake_engine engine{tmp.path() / "engine.sock", [&](const fake_request& req) {
                       return healthy_answer(req, output, override);
                     }};
  auto options = engine.options();
  options.max_response_bytes = extra.max_response_bytes;
  auto rt = make_docker_runtime(options);
  recorder rec;
  auto out =
    rec.wait_outcome_of(*rt, shell_spec(tmp.path(), "fake-fault", "true"));
  CHECK_FALSE(out.succeeded());
  CHECK_THAT(out.infrastructure_error, Catch::Contains(expected_error));
  CHECK(rec.exits() == 1);
  // Whatever went wrong after create, the container is removed.
  auto requests = engine.requests();
  REQUIRE_FALSE(requests.empty());
  if (expected_error.find("network") == std::string::npos)
    CHECK(requests.back().method == "DELETE");
  else
    CHECK(requests.size() == 1); // nothing was created
}

TEST_CASE("docker: a container outlives its killed node and is adopted with "
          "its real exit code and the rest of its output",
          "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto task_id = unique_task_id("adopt");
  // Waits for a file in its workspace, then ends with exit 7.
  auto spec =
    shell_spec(tmp.path(), task_id,
               "echo before; while [ ! -e /workspace/go ]; do sleep 0.05; "
               "done; echo after; echo after-err >&2; exit 7");
  auto id_file = (tmp.path() / "id").string();
  // The node that dies: a child process with its own runtime.
  pid_t node = ::fork();
  REQUIRE(node >= 0);
  if (node == 0) {
    auto rt = make_docker_runtime(engine_options());
    recorder rec;
    auto handle = rt->start(spec, rec.callbacks());
    rec.wait_for_line("before");
    std::ofstream{id_file + ".tmp"} << handle->id();
    std::rename((id_file + ".tmp").c_str(), id_file.c_str());
    for (;;)
      ::pause();
  }
  auto deadline = std::chrono::steady_clock::now() + attempt_bound;
  while (!fs::exists(id_file) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  REQUIRE(fs::exists(id_file));
  std::string container;
  std::ifstream{id_file} >> container;
  ::kill(node, SIGKILL);
  ::waitpid(node, nullptr, 0);
  REQUIRE(containers_of(task_id).size() == 1);

  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  adopt_spec adopt;
  adopt.task_id = spec.task_id;
  adopt.attempt = spec.attempt;
  adopt.agent_id = spec.agent_id;
  adopt.attempt_dir = spec.attempt_dir;
  adopt.runtime_id = container;
  auto handle = rt->adopt(adopt, rec.callbacks());
  CHECK(handle->id() == container);
  std::ofstream{fs::path{spec.attempt_dir} / "workspace" / "go"} << "go";
  auto out = rec.wait();
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.empty());
  CHECK(out.exit_code == 7);
  CHECK(out.started);
  CHECK(contains(rec.lines(), "after"));
  CHECK(contains(rec.lines(), "after-err"));
  CHECK_FALSE(contains(rec.lines(), "before"));
  CHECK(contains(out.tail, "before"));
  // The log holds each line once.
  std::ifstream log{fs::path{spec.attempt_dir} / "output.log"};
  std::string all{std::istreambuf_iterator<char>{log}, {}};
  CHECK(all.find("before") == all.rfind("before"));
  CHECK(all.find("after\n") != std::string::npos);
  CHECK(containers_of(task_id).empty());
  CHECK(rec.exits() == 1);
}

TEST_CASE("docker: a container that is gone cannot be adopted", "[docker]") {
  if (!engine_ready())
    return;
  temp_dir tmp;
  auto rt = make_docker_runtime(engine_options());
  recorder rec;
  adopt_spec adopt;
  adopt.task_id = unique_task_id("gone");
  adopt.attempt_dir = (tmp.path() / "a").string();
  adopt.runtime_id = "0123456789abcdef0123456789abcdef";
  rt->adopt(adopt, rec.callbacks());
  auto out = rec.wait();
  CHECK(out.infrastructure_error.find("could not be adopted") !=
        std::string::npos);
  CHECK(out.infrastructure_error.find("gone") != std::string::npos);
}

TEST_CASE("docker: an engine that records OOMKilled after answering wait "
          "still reports the OOM kill",
          "[docker][fake-engine]") {
  // The race seen on a freshly started engine: wait says 137 before the
  // engine has handled the kernel's OOM event; inspect says OOMKilled
  // false, then true.
  temp_dir tmp;
  std::atomic<int> inspections{0};
  auto path = "/v1.41/containers/" + fake_id;
  fake_engine engine{
    tmp.path() / "engine.sock", [&](const fake_request& req) {
      return healthy_answer(req, "", [&](const fake_request& r) {
        if (r.target == path + "/wait")
          return http_answer(200, R"({"StatusCode":137})");
        if (r.target == path + "/json")
          return http_answer(
            200, ++inspections < 3
                   ? R"({"State":{"ExitCode":137,"OOMKilled":false}})"
                   : R"({"State":{"ExitCode":137,"OOMKilled":true}})");
        return std::string{};
      });
    }};
  auto rt = make_docker_runtime(engine.options());
  recorder rec;
  auto spec = shell_spec(tmp.path(), "fake-oom", "eat memory");
  spec.memory_limit_mb = 16;
  auto out = rec.wait_outcome_of(*rt, spec);
  CHECK(out.exit_code == 137);
  CHECK(out.oom_killed);
  CHECK(inspections == 3);

  SECTION("a SIGKILL without a memory limit is not looked at again") {
    inspections = 0;
    recorder rec2;
    auto out2 =
      rec2.wait_outcome_of(*rt, shell_spec(tmp.path(), "fake-kill", "killed"));
    CHECK(out2.exit_code == 137);
    CHECK_FALSE(out2.oom_killed);
    CHECK(inspections == 1);
  }
}

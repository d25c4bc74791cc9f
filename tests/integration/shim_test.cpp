// tasksup-shim and adoption: a process runtime whose program dies (SIGKILL)
// in the middle of an attempt. The dying runtime runs in a forked child of
// this test; a fresh runtime here adopts the attempt by its records.

#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;
using tasksup::attempt_outcome;
using tasksup::runtime::adopt_spec;
using tasksup::runtime::attempt_callbacks;
using tasksup::runtime::attempt_spec;
using tasksup::runtime::make_process_runtime;
using tasksup::runtime::orphan_policy;
using tasksup::runtime::output_stream;
using tasksup::runtime::process_runtime_options;
using tasksup::runtime::reap_spec;
namespace detail = tasksup::runtime::detail;
namespace fs = std::filesystem;

namespace {

constexpr auto patience = 60s;

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

bool eventually(const std::function<bool()>& done,
                std::chrono::milliseconds limit = patience) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

/// Reaps whatever children of ours have ended: shims orphaned by the killed
/// runtime are reparented to this process (a subreaper, below).
void reap_children() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

bool group_gone(pid_t pgid) {
  reap_children();
  return ::kill(-pgid, 0) != 0 && errno == ESRCH;
}

struct temp_dir {
  std::string path;
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
      std::string{base != nullptr ? base : "/tmp"} + "/tasksup-shim-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

struct recorder {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::pair<output_stream, std::string>> lines;
  std::optional<attempt_outcome> outcome;
  int exit_calls = 0;

  attempt_callbacks callbacks() {
    attempt_callbacks cb;
    cb.on_line = [this](output_stream s, std::string_view line) {
      std::lock_guard<std::mutex> guard{mtx};
      lines.emplace_back(s, std::string{line});
      return true;
    };
    cb.on_exit = [this](attempt_outcome out) {
      std::lock_guard<std::mutex> guard{mtx};
      outcome = std::move(out);
      ++exit_calls;
      cv.notify_all();
    };
    return cb;
  }

  attempt_outcome wait() {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, patience, [&] { return outcome.has_value(); }));
    return *outcome;
  }

  bool has_line(output_stream s, const std::string& text) {
    std::lock_guard<std::mutex> guard{mtx};
    return std::find(lines.begin(), lines.end(), std::pair{s, text}) !=
           lines.end();
  }
};

bool tail_has(const attempt_outcome& out, const std::string& text) {
  return std::find(out.tail.begin(), out.tail.end(), text) != out.tail.end();
}

/// An agent that prints "before", waits for the file `$1`, prints "after"
/// on stdout and "after-err" on stderr, and exits 7.
std::vector<std::string> waiting_agent(const std::string& go) {
  return {"/bin/sh", "-c",
          "echo before; while [ ! -e \"$1\" ]; do sleep 0.02; done; "
          "echo after; echo after-err >&2; exit 7",
          "agent", go};
}

/// The node that dies: a child process running a process runtime that
/// starts `spec`, writes the handle's id to `<dir>/id` and waits to be
/// killed.
struct doomed_node {
  pid_t pid = -1;
  std::string id_file;

  doomed_node(const attempt_spec& spec, orphan_policy policy,
              const std::string& dir)
    : id_file(dir + "/id") {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      process_runtime_options opts;
      opts.orphans = policy;
      auto rt = make_process_runtime(std::move(opts));
      auto handle = rt->start(spec, {});
      std::ofstream{id_file + ".tmp"} << handle->id();
      std::rename((id_file + ".tmp").c_str(), id_file.c_str());
      for (;;)
        ::pause();
    }
  }

  /// The agent's pid once the node has started it.
  pid_t agent() {
    REQUIRE(eventually([&] { return fs::exists(id_file); }));
    return static_cast<pid_t>(std::stol(read_all(id_file)));
  }

  void kill9() {
    REQUIRE(::kill(pid, SIGKILL) == 0);
    REQUIRE(::waitpid(pid, nullptr, 0) == pid);
  }

  ~doomed_node() {
    if (::kill(pid, SIGKILL) == 0)
      ::waitpid(pid, nullptr, 0);
  }
};

struct fixture {
  temp_dir dir;
  std::string attempt_dir;
  std::string go;
  attempt_spec spec;

  fixture() {
    // Orphaned shims come to us, so their ends can be reaped and a group
    // checked for real emptiness (a zombie still counts as a member).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    attempt_dir = dir.path + "/task/attempt-1";
    go = dir.path + "/go";
    spec.task_id = "adopted";
    spec.attempt = 1;
    spec.agent_id = "waiter";
    spec.argv = waiting_agent(go);
    spec.attempt_dir = attempt_dir;
  }

  adopt_spec adoption(pid_t agent) const {
    adopt_spec a;
    a.task_id = spec.task_id;
    a.attempt = spec.attempt;
    a.agent_id = spec.agent_id;
    a.attempt_dir = attempt_dir;
    a.runtime_id = std::to_string(agent);
    return a;
  }

  bool logged(const std::string& text) const {
    return read_all(attempt_dir + "/output.log").find(text) !=
           std::string::npos;
  }
};

} // namespace

TEST_CASE("shim: an attempt outlives its killed node and is adopted with its "
          "real exit code and the rest of its output") {
  fixture f;
  doomed_node node{f.spec, orphan_policy::keep, f.dir.path};
  auto agent = node.agent();
  REQUIRE(agent > 0);
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node.kill9();
  // The agent runs on under its shim.
  REQUIRE(::kill(agent, 0) == 0);

  process_runtime_options opts;
  opts.orphans = orphan_policy::keep;
  auto rt = make_process_runtime(std::move(opts));
  recorder rec;
  auto handle = rt->adopt(f.adoption(agent), rec.callbacks());
  CHECK(handle->id() == std::to_string(agent));
  std::ofstream{f.go} << "go";
  auto out = rec.wait();
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.empty());
  CHECK(out.exit_code == 7);
  CHECK(out.signal == 0);
  CHECK(out.started);
  // Lines from after the adoption are delivered with their stream; the
  // earlier ones only rebuild the tail.
  CHECK(rec.has_line(output_stream::out, "after"));
  CHECK(rec.has_line(output_stream::err, "after-err"));
  CHECK_FALSE(rec.has_line(output_stream::out, "before"));
  CHECK(tail_has(out, "before"));
  CHECK(tail_has(out, "after"));
  CHECK(out.log_path == f.attempt_dir + "/output.log");
  CHECK(f.logged("before\nafter\n"));
  CHECK(eventually([&] { return group_gone(agent); }));
  rt.reset();
  CHECK(rec.exit_calls == 1);
}

TEST_CASE("shim: an attempt that ended while no node watched is reported "
          "from its exit record") {
  fixture f;
  doomed_node node{f.spec, orphan_policy::keep, f.dir.path};
  auto agent = node.agent();
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node.kill9();
  std::ofstream{f.go} << "go";
  REQUIRE(
    eventually([&] { return fs::exists(f.attempt_dir + "/exit.status"); }));

  auto rt = make_process_runtime();
  recorder rec;
  rt->adopt(f.adoption(agent), rec.callbacks());
  auto out = rec.wait();
  CHECK(out.infrastructure_error.empty());
  CHECK(out.exit_code == 7);
  CHECK(tail_has(out, "before"));
  CHECK(tail_has(out, "after-err"));
  // All of it happened before the adoption: nothing is delivered as new.
  CHECK(rec.lines.empty());
  rt.reset();
  CHECK(rec.exit_calls == 1);
}

TEST_CASE("shim: an attempt whose shim died too cannot be adopted: its "
          "process group is killed and the outcome is an infrastructure "
          "failure") {
  fixture f;
  doomed_node node{f.spec, orphan_policy::keep, f.dir.path};
  auto agent = node.agent();
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node.kill9();
  auto path = f.attempt_dir + "/shim.pid";
  auto rec_text = detail::read_small_file(path);
  REQUIRE(rec_text);
  auto shim = detail::parse_shim_record(*rec_text, path);
  REQUIRE(shim);
  CHECK(shim->agent_pid == agent);
  REQUIRE(::kill(shim->shim_pid, SIGKILL) == 0);
  REQUIRE(eventually([&] {
    reap_children();
    return ::kill(shim->shim_pid, 0) != 0;
  }));
  // The agent is an orphan now, still running in its group.
  REQUIRE(::kill(-agent, 0) == 0);

  auto rt = make_process_runtime();
  recorder rec;
  rt->adopt(f.adoption(agent), rec.callbacks());
  auto out = rec.wait();
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.find("node restarted") != std::string::npos);
  CHECK(out.infrastructure_error.find("could not be adopted") !=
        std::string::npos);
  CHECK(out.exit_code != 0);
  CHECK(tail_has(out, "before"));
  CHECK(eventually([&] { return group_gone(agent); }));
  rt.reset();
  CHECK(rec.exit_calls == 1);
}

TEST_CASE("shim: a record naming processes that are not an attempt's kills "
          "nothing") {
  fixture f;
  fs::create_directories(f.attempt_dir);
  // Two innocent processes, each leading its own group.
  auto innocent = [] {
    pid_t p = ::fork();
    REQUIRE(p >= 0);
    if (p == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(p, p);
    return p;
  };
  auto a = innocent();
  auto b = innocent();
  REQUIRE(
    eventually([&] { return detail::process_start_time(b).has_value(); }));
  detail::shim_record hostile;
  hostile.shim_pid = a;
  hostile.shim_start = detail::process_start_time(a).value_or(0);
  hostile.agent_pid = b;
  hostile.agent_pgid = b;
  hostile.agent_start = detail::process_start_time(b).value_or(0);
  REQUIRE(detail::write_file_atomically(f.attempt_dir + "/shim.pid",
                                        detail::format_shim_record(hostile))
            .empty());

  auto rt = make_process_runtime();
  recorder rec;
  rt->adopt(f.adoption(b), rec.callbacks());
  auto out = rec.wait();
  CHECK(out.infrastructure_error.find("could not be adopted") !=
        std::string::npos);
  CHECK(::kill(a, 0) == 0);
  CHECK(::kill(b, 0) == 0);
  // reap() leaves them alone as well.
  reap_spec reap;
  reap.attempt_root = f.dir.path;
  rt->reap(reap);
  CHECK(::kill(a, 0) == 0);
  CHECK(::kill(b, 0) == 0);
  for (auto p : {a, b}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

TEST_CASE("shim: a corrupt exit record is not believed") {
  fixture f;
  fs::create_directories(f.attempt_dir);
  REQUIRE(detail::write_file_atomically(f.attempt_dir + "/exit.status",
                                        "tasksup-shim-exit 1\nexit_code 0")
            .empty());
  auto rt = make_process_runtime();
  recorder rec;
  rt->adopt(f.adoption(12345), rec.callbacks());
  auto out = rec.wait();
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.find("exit.status") != std::string::npos);
  CHECK(out.infrastructure_error.find("incomplete") != std::string::npos);
  CHECK_FALSE(out.succeeded());
}

TEST_CASE("shim: with orphan_policy kill the agent dies with the program "
          "that started it, and its end is recorded") {
  fixture f;
  doomed_node node{f.spec, orphan_policy::kill, f.dir.path};
  auto agent = node.agent();
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node.kill9();
  CHECK(eventually([&] { return group_gone(agent); }));
  auto path = f.attempt_dir + "/exit.status";
  REQUIRE(eventually([&] { return fs::exists(path); }));
  auto text = detail::read_small_file(path);
  REQUIRE(text);
  auto rec = detail::parse_exit_record(*text, path);
  REQUIRE(rec);
  CHECK(rec->signal == SIGKILL);
  CHECK(rec->exit_code == 128 + SIGKILL);
}

TEST_CASE("shim: reap kills the attempts below a root that nobody adopts, "
          "and leaves the kept ones") {
  fixture f;
  auto kept_spec = f.spec;
  kept_spec.attempt = 2;
  kept_spec.attempt_dir = f.dir.path + "/task/attempt-2";
  temp_dir other;
  doomed_node node1{f.spec, orphan_policy::keep, f.dir.path};
  doomed_node node2{kept_spec, orphan_policy::keep, other.path};
  auto reaped_agent = node1.agent();
  auto kept_agent = node2.agent();
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node1.kill9();
  node2.kill9();

  auto rt = make_process_runtime();
  reap_spec reap;
  reap.attempt_root = f.dir.path;
  reap.keep.insert(std::to_string(kept_agent));
  auto report = rt->reap(reap);
  CHECK(report.errors.empty());
  REQUIRE(report.reaped.size() == 1);
  CHECK(report.reaped[0].find(f.attempt_dir) != std::string::npos);
  CHECK(eventually([&] { return group_gone(reaped_agent); }));
  CHECK(::kill(kept_agent, 0) == 0);
  // The reaped attempt's shim recorded the kill.
  CHECK(eventually([&] { return fs::exists(f.attempt_dir + "/exit.status"); }));
  ::kill(-kept_agent, SIGKILL);
  CHECK(eventually([&] { return group_gone(kept_agent); }));
}

TEST_CASE("shim: a receiver that stops taking lines holds the agent back, "
          "and still gets every line when it resumes after the agent "
          "exited") {
  temp_dir dir;
  process_runtime_options opts;
  // Far shorter than the pause below: output waiting for the receiver
  // must not be taken for output held open by a stray process.
  opts.drain_timeout = 200ms;
  std::mutex mtx;
  std::vector<std::string> warnings;
  opts.on_warning = [&](std::string_view w) {
    std::lock_guard<std::mutex> guard{mtx};
    warnings.emplace_back(w);
  };
  auto rt = make_process_runtime(std::move(opts));
  std::condition_variable cv;
  std::vector<std::string> lines;
  std::optional<attempt_outcome> outcome;
  // Full from the first line until resumed.
  bool holding = true;
  attempt_callbacks cb;
  cb.on_line = [&](output_stream, std::string_view line) {
    std::lock_guard<std::mutex> guard{mtx};
    lines.emplace_back(line);
    return !holding;
  };
  cb.on_exit = [&](attempt_outcome out) {
    std::lock_guard<std::mutex> guard{mtx};
    outcome = std::move(out);
    cv.notify_all();
  };
  attempt_spec spec;
  spec.task_id = "flow";
  spec.agent_id = "seq";
  // About 110 kB: more than one pipe holds, less than the pipes and the
  // shim's one pending read hold together, so the agent can finish.
  spec.argv = {"/bin/sh", "-c", "seq 1 20000"};
  spec.attempt_dir = dir.path + "/attempt-1";
  auto handle = rt->start(spec, cb);
  auto agent = static_cast<pid_t>(std::stol(handle->id()));
  // The agent has written everything and ended while nobody read.
  REQUIRE(eventually([&] { return group_gone(agent); }));
  std::this_thread::sleep_for(3 * 200ms);
  {
    std::lock_guard<std::mutex> guard{mtx};
    // At most what the first read held.
    CHECK(lines.size() < 20000);
    CHECK_FALSE(outcome.has_value());
    holding = false;
  }
  handle->resume_output();
  std::unique_lock<std::mutex> guard{mtx};
  REQUIRE(cv.wait_for(guard, patience, [&] { return outcome.has_value(); }));
  CHECK(outcome->exit_code == 0);
  for (auto& w : warnings)
    UNSCOPED_INFO(w);
  UNSCOPED_INFO(read_all(dir.path + "/attempt-1/exit.status"));
  CHECK(warnings.empty());
  auto log = read_all(dir.path + "/attempt-1/output.log");
  CHECK(std::count(log.begin(), log.end(), '\n') == 20000);
  REQUIRE(lines.size() == 20000);
  CHECK(lines.front() == "1");
  CHECK(lines.back() == "20000");
}

TEST_CASE("shim: an adopted attempt can be stopped and killed like one "
          "started here") {
  fixture f;
  // Ignores SIGTERM, so only the kill after the grace ends it.
  f.spec.argv = {"/bin/sh", "-c",
                 "trap '' TERM; echo before; while :; do sleep 0.05; done"};
  doomed_node node{f.spec, orphan_policy::keep, f.dir.path};
  auto agent = node.agent();
  REQUIRE(eventually([&] { return f.logged("before\n"); }));
  node.kill9();

  auto rt = make_process_runtime();
  recorder rec;
  auto handle = rt->adopt(f.adoption(agent), rec.callbacks());
  handle->stop(100ms);
  auto out = rec.wait();
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.empty());
  CHECK(out.signal == SIGKILL);
  CHECK(out.exit_code == 128 + SIGKILL);
  CHECK(eventually([&] { return group_gone(agent); }));
}

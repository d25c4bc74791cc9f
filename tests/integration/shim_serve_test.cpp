// The serving shim (`tasksup-shim --serve`), which runs the attempts of one
// task one after another so that an attempt costs one process start: first
// driven by hand over its socket, as the process runtime drives it (the
// order of a late stop and the next request, hang-ups, hostile requests),
// then through the process runtime (which attempts share a shim, a shim
// that died while idle, the idle timeout, one shim per attempt when asked).

#include "tasksup_child.hpp"

#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tasksup::test;
using tasksup::attempt_outcome;
using tasksup::runtime::attempt_callbacks;
using tasksup::runtime::attempt_spec;
using tasksup::runtime::make_process_runtime;
using tasksup::runtime::process_runtime_options;
namespace detail = tasksup::runtime::detail;
namespace fs = std::filesystem;

namespace {

constexpr auto patience = 60s;

std::string shim_program() {
  return (fs::path{TASKSUP_BINARY}.parent_path() / "tasksup-shim").string();
}

/// A `tasksup-shim --serve` started by the test, which plays the runtime.
struct served {
  pid_t pid = -1;
  int sock = -1;
  std::string stderr_path;

  served(const scratch& dir, const std::string& orphan) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    sock = sv[0];
    stderr_path = dir / "shim.stderr";
    std::vector<std::string> args = {shim_program(), "--serve", dir.path(),
                                     "--orphan", orphan};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, sv[1], 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(),
                          environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(sv[1]);
  }

  ~served() {
    if (sock >= 0)
      ::close(sock);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  /// One line from the shim ("" when it hung up or said nothing in time).
  std::string line() {
    std::string out;
    char c;
    while (true) {
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, 60'000) <= 0)
        return "";
      if (::read(sock, &c, 1) != 1)
        return "";
      out += c;
      if (c == '\n')
        return out;
    }
  }

  /// The attempt's end: the exit record the shim sent with it ("" when it
  /// hung up or said something else).
  std::string end() {
    auto head = line();
    if (head.rfind("end ", 0) != 0)
      return "";
    std::string text(std::stoul(head.substr(4)), '\0');
    std::size_t got = 0;
    while (got < text.size()) {
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, 60'000) <= 0)
        return "";
      auto n = ::read(sock, text.data() + got, text.size() - got);
      if (n <= 0)
        return "";
      got += static_cast<std::size_t>(n);
    }
    return text;
  }

  /// Waits for the shim to end with a failure status, having said `words`
  /// on its stderr.
  void ends_refusing(const std::string& words) {
    auto status = wait_exit();
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    CHECK(slurp(stderr_path).find(words) != std::string::npos);
  }

  /// The shim's exit status once it has ended.
  int wait_exit() {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    pid = -1;
    return status;
  }
};

/// The pipes an attempt's output comes back on.
struct output_pipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  output_pipes() {
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  }
  ~output_pipes() {
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0)
        ::close(fd);
  }
  /// Closes our write ends (the shim has its own copies).
  void sent() {
    ::close(out[1]);
    ::close(err[1]);
    out[1] = err[1] = -1;
  }
  /// What the shim forwarded on stdout up to and including the first
  /// newline (read as the runtime reads, while the attempt runs: the shim
  /// holds a stream back until the other has been read).
  std::string stdout_line() {
    std::string text;
    char c;
    while (text.empty() || text.back() != '\n') {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 60'000) <= 0 || ::read(out[0], &c, 1) != 1)
        break;
      text += c;
    }
    return text;
  }
  /// What is left on stdout once the attempt has ended, without waiting:
  /// the shim keeps the pipe open after its end.
  std::string stdout_rest() {
    std::string text;
    char buf[4096];
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof buf)) > 0)
      text.append(buf, static_cast<std::size_t>(n));
    return text;
  }
};

detail::shim_request request(const scratch& dir, const std::string& name,
                             std::vector<std::string> argv,
                             std::vector<std::string> env = {}) {
  detail::shim_request r;
  r.attempt_dir = dir / name;
  fs::create_directories(r.attempt_dir);
  r.cwd = dir / (name + "-work");
  fs::create_directories(r.cwd);
  r.log_bytes = 1 << 20;
  r.drain_ms = 2000;
  r.group_ms = 5000;
  r.argv = std::move(argv);
  r.env = std::move(env);
  r.env.push_back("PATH=/usr/bin:/bin");
  return r;
}

bool send(served& s, const detail::shim_request& r, output_pipes& pipes) {
  auto ok = detail::send_shim_request(s.sock, detail::encode_shim_request(r),
                                      pipes.out[1], pipes.err[1], 10s);
  pipes.sent();
  return ok;
}

detail::exit_record exit_of(const std::string& attempt_dir) {
  auto path = attempt_dir + "/" + std::string{detail::exit_record_name};
  auto text = detail::read_small_file(path);
  REQUIRE(text);
  auto rec = detail::parse_exit_record(*text, path);
  REQUIRE(rec);
  return *rec;
}

detail::shim_record shim_of(const std::string& attempt_dir) {
  auto path = attempt_dir + "/" + std::string{detail::shim_record_name};
  auto text = detail::read_small_file(path);
  REQUIRE(text);
  auto rec = detail::parse_shim_record(*text, path);
  REQUIRE(rec);
  return *rec;
}

bool process_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

} // namespace

TEST_CASE("shim --serve: a task's attempts run one after another under one "
          "shim, each with its own directory, environment and output",
          "[shim]") {
  scratch dir;
  served shim{dir, "kill"};
  std::unique_ptr<output_pipes> last;
  for (int i = 1; i <= 2; ++i) {
    auto kept = std::make_unique<output_pipes>();
    auto& pipes = *kept;
    auto name = "attempt-" + std::to_string(i);
    auto r = request(dir, name,
                     {"sh", "-c", "echo \"$WHO $PWD\"; echo oops >&2; exit $1",
                      "agent", std::to_string(i + 2)},
                     {"WHO=attempt" + std::to_string(i)});
    REQUIRE(send(shim, r, pipes));
    auto pid_line = shim.line();
    REQUIRE(pid_line.size() > 1);
    CHECK(std::stol(pid_line) > 0);
    if (last) {
      // The last attempt's pipes hang up once the next request is taken.
      pollfd p{last->out[0], POLLIN, 0};
      REQUIRE(::poll(&p, 1, 60'000) == 1);
      CHECK(last->stdout_rest().empty());
      char c;
      CHECK(::read(last->out[0], &c, 1) == 0);
    }
    // Forwarded (read as the runtime reads: the shim keeps the order of
    // the two streams for a reader that reads both), then its end, after
    // which nothing more comes (the pipes stay open until the next
    // request).
    CHECK(pipes.stdout_line() ==
          "attempt" + std::to_string(i) + " " + r.cwd + "\n");
    // The record it sent is the one it wrote.
    auto record = shim.end();
    CHECK(record == slurp(r.attempt_dir + "/exit.status"));
    CHECK(pipes.stdout_rest().empty());
    last = std::move(kept);
    CHECK(exit_of(r.attempt_dir).exit_code == i + 2);
    CHECK(slurp(r.attempt_dir + "/output.log").find("oops") !=
          std::string::npos);
    auto rec = shim_of(r.attempt_dir);
    CHECK(rec.shim_pid == shim.pid);
    CHECK(rec.agent_pid == std::stol(pid_line));
    // The record's shim is recognised as this attempt's.
    CHECK(detail::is_shim_of(rec.shim_pid, rec.shim_start, r.attempt_dir));
    CHECK_FALSE(detail::is_shim_of(rec.shim_pid, rec.shim_start,
                                   dir / "elsewhere/attempt-1"));
  }
  // Hung up while idle: it exits, and cleanly.
  ::close(shim.sock);
  shim.sock = -1;
  auto status = shim.wait_exit();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("shim --serve: a stop meant for an attempt that has ended is "
          "dropped, not given to the next attempt's agent",
          "[shim]") {
  scratch dir;
  served shim{dir, "kill"};
  {
    output_pipes pipes;
    REQUIRE(send(shim, request(dir, "attempt-1", {"true"}), pipes));
    REQUIRE(shim.line().size() > 1);
    REQUIRE_FALSE(shim.end().empty());
  }
  // The runtime's stop for attempt 1 arrives late, and the next request
  // right behind it: held stopped, the shim finds both waiting at once.
  REQUIRE(::kill(shim.pid, SIGSTOP) == 0);
  REQUIRE(::kill(shim.pid, SIGTERM) == 0);
  output_pipes pipes;
  auto r = request(dir, "attempt-2", {"sh", "-c", "sleep 0.2; exit 5"});
  REQUIRE(send(shim, r, pipes));
  REQUIRE(::kill(shim.pid, SIGCONT) == 0);
  REQUIRE(shim.line().size() > 1);
  REQUIRE_FALSE(shim.end().empty());
  auto rec = exit_of(r.attempt_dir);
  CHECK(rec.signal == 0);
  CHECK(rec.exit_code == 5);
}

TEST_CASE("shim --serve: when the runtime hangs up during an attempt, "
          "--orphan kill ends the agent, records its end and exits",
          "[shim]") {
  scratch dir;
  served shim{dir, "kill"};
  output_pipes pipes;
  auto r = request(dir, "attempt-1", {"sleep", "300"});
  REQUIRE(send(shim, r, pipes));
  auto agent = std::stol(shim.line());
  REQUIRE(agent > 0);
  ::close(shim.sock);
  shim.sock = -1;
  auto status = shim.wait_exit();
  CHECK(WIFEXITED(status));
  CHECK(process_gone(static_cast<pid_t>(agent)));
  auto rec = exit_of(r.attempt_dir);
  CHECK(rec.signal == SIGKILL);
}

TEST_CASE("shim --serve: a request that is not one ends the shim with a "
          "message, and runs nothing",
          "[shim]") {
  scratch dir;
  SECTION("garbage") {
    served shim{dir, "kill"};
    output_pipes pipes;
    REQUIRE(detail::send_shim_request(shim.sock, std::string{"hello\0", 6},
                                      pipes.out[1], pipes.err[1], 10s));
    shim.ends_refusing("shim request: unknown header");
  }
  SECTION("a relative directory") {
    served shim{dir, "kill"};
    output_pipes pipes;
    auto r = request(dir, "attempt-1", {"true"});
    r.attempt_dir = "attempt-1";
    REQUIRE(send(shim, r, pipes));
    CHECK(shim.line().empty());
    shim.ends_refusing("attempt-dir");
  }
  SECTION("an attempt outside the directory it serves") {
    served shim{dir, "kill"};
    output_pipes pipes;
    auto r = request(dir, "attempt-1", {"true"});
    r.attempt_dir = "/elsewhere/attempt-1";
    REQUIRE(send(shim, r, pipes));
    CHECK(shim.line().empty());
    shim.ends_refusing("not in " + dir.path());
  }
  SECTION("no pipes with it") {
    served shim{dir, "kill"};
    std::string frame(4, '\0');
    frame[0] = 8;
    frame += "12345678";
    REQUIRE(::write(shim.sock, frame.data(), frame.size()) ==
            static_cast<ssize_t>(frame.size()));
    shim.ends_refusing("0 descriptors");
  }
  SECTION("a length beyond the limit") {
    served shim{dir, "kill"};
    output_pipes pipes;
    // A length alone: send_shim_request refuses to send such a payload.
    REQUIRE(detail::send_with_fds(shim.sock, "\xff\xff\xff\x7f", pipes.out[1],
                                  pipes.err[1], 10s));
    shim.ends_refusing("malformed request");
  }
}

namespace {

struct outcome_wait {
  // Shared with the callback, which may outlive a failed wait.
  std::shared_ptr<std::promise<attempt_outcome>> promise =
    std::make_shared<std::promise<attempt_outcome>>();
  std::future<attempt_outcome> future = promise->get_future();

  attempt_callbacks callbacks() {
    attempt_callbacks cb;
    cb.on_exit = [p = promise](attempt_outcome out) {
      p->set_value(std::move(out));
    };
    return cb;
  }

  attempt_outcome get() {
    REQUIRE(future.wait_for(patience) == std::future_status::ready);
    return future.get();
  }
};

/// Attempt `attempt` of task "t", agent "a", in `attempt_dir`.
attempt_spec spec_of(const std::string& attempt_dir,
                     std::vector<std::string> argv, int attempt = 1) {
  attempt_spec spec;
  spec.task_id = "t";
  spec.attempt = attempt;
  spec.agent_id = "a";
  spec.argv = std::move(argv);
  spec.attempt_dir = attempt_dir;
  return spec;
}

attempt_outcome run_attempt(tasksup::runtime::container_runtime& rt,
                            const std::string& attempt_dir, int attempt,
                            std::vector<std::string> argv) {
  auto spec = spec_of(attempt_dir, std::move(argv), attempt);
  outcome_wait w;
  rt.start(spec, w.callbacks());
  return w.get();
}

} // namespace

TEST_CASE("process runtime: the attempts of one task share a shim, another "
          "task has its own, and none outlives the runtime",
          "[shim]") {
  scratch dir;
  auto rt = make_process_runtime();
  auto a1 = run_attempt(*rt, dir / "a/attempt-1", 1,
                        {"sh", "-c", "echo \"$TASKSUP_ATTEMPT\"; exit 3"});
  auto a2 = run_attempt(*rt, dir / "a/attempt-2", 2,
                        {"sh", "-c", "echo \"$TASKSUP_ATTEMPT\"; exit 0"});
  auto b1 = run_attempt(*rt, dir / "b/attempt-1", 1, {"false"});
  CHECK(a1.exit_code == 3);
  CHECK(a1.tail == std::vector<std::string>{"1"});
  CHECK(a2.exit_code == 0);
  CHECK(a2.tail == std::vector<std::string>{"2"});
  CHECK(b1.exit_code == 1);
  auto sa1 = shim_of(dir / "a/attempt-1");
  auto sa2 = shim_of(dir / "a/attempt-2");
  auto sb1 = shim_of(dir / "b/attempt-1");
  CHECK(sa1.shim_pid == sa2.shim_pid);
  CHECK(sa1.shim_pid != sb1.shim_pid);
  CHECK(slurp("/proc/" + std::to_string(sa1.shim_pid) + "/cmdline")
          .find(std::string{"--serve\0", 8} + dir.path() + "/a") !=
        std::string::npos);
  rt.reset();
  // Reaped before the runtime's end returned.
  CHECK(process_gone(sa1.shim_pid));
  CHECK(process_gone(sb1.shim_pid));
}

TEST_CASE("process runtime: a task's shim that died while idle is replaced "
          "for the next attempt",
          "[shim]") {
  scratch dir;
  auto rt = make_process_runtime();
  auto first = run_attempt(*rt, dir / "t/attempt-1", 1, {"true"});
  REQUIRE(first.exit_code == 0);
  auto old_shim = shim_of(dir / "t/attempt-1").shim_pid;
  REQUIRE(::kill(old_shim, SIGKILL) == 0);
  auto second = run_attempt(*rt, dir / "t/attempt-2", 2,
                            {"sh", "-c", "echo again; exit 4"});
  INFO(second.infrastructure_error);
  CHECK(second.infrastructure_error.empty());
  CHECK(second.exit_code == 4);
  CHECK(second.tail == std::vector<std::string>{"again"});
  CHECK(shim_of(dir / "t/attempt-2").shim_pid != old_shim);
  // The dead one was reaped, not left a zombie.
  CHECK(process_gone(old_shim));
}

TEST_CASE("process runtime: an idle shim exits after shim_idle_timeout, and "
          "with 0 every attempt has a shim of its own",
          "[shim]") {
  scratch dir;
  SECTION("idle timeout") {
    process_runtime_options opts;
    opts.shim_idle_timeout = 100ms;
    auto rt = make_process_runtime(std::move(opts));
    REQUIRE(run_attempt(*rt, dir / "t/attempt-1", 1, {"true"}).exit_code == 0);
    auto shim = shim_of(dir / "t/attempt-1").shim_pid;
    // Exited and reaped by the runtime, which still runs.
    CHECK(eventually([&] { return process_gone(shim); }, patience));
    // The task's next attempt has a new one.
    REQUIRE(run_attempt(*rt, dir / "t/attempt-2", 2, {"true"}).exit_code == 0);
    CHECK(shim_of(dir / "t/attempt-2").shim_pid != shim);
  }
  SECTION("a shim per attempt") {
    process_runtime_options opts;
    opts.shim_idle_timeout = 0ms;
    auto rt = make_process_runtime(std::move(opts));
    REQUIRE(run_attempt(*rt, dir / "t/attempt-1", 1, {"true"}).exit_code == 0);
    REQUIRE(run_attempt(*rt, dir / "t/attempt-2", 2, {"true"}).exit_code == 0);
    auto s1 = shim_of(dir / "t/attempt-1");
    auto s2 = shim_of(dir / "t/attempt-2");
    CHECK(s1.shim_pid != s2.shim_pid);
  }
}

TEST_CASE("process runtime: attempts writing to both streams all end, the "
          "last line of each stream delivered",
          "[shim]") {
  // The shim holds a read back until the runtime has read the other
  // stream, and must then wake for it: a shim that decided whether to wait
  // for the pipe and how long to sleep from two different looks at it slept
  // for ever when the runtime read in between (1 attempt in a few hundred
  // under `tasksup run`).
  scratch dir;
  auto rt = make_process_runtime();
  for (int i = 1; i <= 400; ++i) {
    auto spec = spec_of(dir / ("t/attempt-" + std::to_string(i)),
                        {"sh", "-c", "echo out; echo err >&2; exit 1"}, i);
    outcome_wait w;
    rt->start(spec, w.callbacks());
    REQUIRE(w.future.wait_for(30s) == std::future_status::ready);
    auto out = w.future.get();
    REQUIRE(out.exit_code == 1);
    REQUIRE(out.tail == std::vector<std::string>{"out", "err"});
  }
}

TEST_CASE("process runtime: an attempt whose end comes with its start's "
          "report is reported",
          "[shim]") {
  // An agent that exits at once can have its shim's end arrive with the
  // report of its start; nothing more comes on the socket then, so the
  // runtime must not wait for it to say anything (it waited for ever, in
  // a few of every hundred attempts of /bin/false). A stand-in shim makes
  // that happen every time.
  scratch dir;
  process_runtime_options opts;
  opts.shim_path = std::string{TASKSUP_FIXTURES_DIR} + "/eager_shim.py";
  auto rt = make_process_runtime(std::move(opts));
  for (int i = 1; i <= 3; ++i) {
    auto out =
      run_attempt(*rt, dir / ("t/attempt-" + std::to_string(i)), i, {"true"});
    INFO(out.infrastructure_error);
    CHECK(out.infrastructure_error.empty());
    CHECK(out.exit_code == 7);
  }
}

namespace {

/// What an attempt's callbacks were told, in order.
struct told {
  std::mutex mtx;
  std::vector<std::string> order;
  std::string started_id;
  outcome_wait exit;

  static attempt_callbacks callbacks(const std::shared_ptr<told>& t) {
    auto cb = t->exit.callbacks();
    auto on_exit = std::move(cb.on_exit);
    cb.on_started = [t](std::string_view id) {
      std::lock_guard<std::mutex> guard{t->mtx};
      t->order.push_back("started");
      t->started_id = id;
    };
    cb.on_line = [t](tasksup::runtime::output_stream, std::string_view line) {
      std::lock_guard<std::mutex> guard{t->mtx};
      t->order.push_back("line " + std::string{line});
      return true;
    };
    cb.on_exit = [t, on_exit](attempt_outcome out) {
      {
        std::lock_guard<std::mutex> guard{t->mtx};
        t->order.push_back("exit");
      }
      on_exit(std::move(out));
    };
    return cb;
  }
};

} // namespace

TEST_CASE("process runtime: start does not wait for the shim to start the "
          "agent, and the agent's pid comes first, through on_started",
          "[shim]") {
  scratch dir;
  auto rt = make_process_runtime();
  // The agent prints its own pid: the one the runtime announces.
  for (int attempt = 1; attempt <= 2; ++attempt) {
    INFO("attempt " << attempt << " (the second on the task's idle shim)");
    auto t = std::make_shared<told>();
    auto handle =
      rt->start(spec_of(dir / ("t/attempt-" + std::to_string(attempt)),
                        {"sh", "-c", "echo $$; exit 5"}),
                told::callbacks(t));
    CHECK(handle->id_later());
    auto out = t->exit.get();
    CHECK(out.exit_code == 5);
    std::lock_guard<std::mutex> guard{t->mtx};
    REQUIRE_FALSE(t->started_id.empty());
    CHECK(t->order ==
          std::vector<std::string>{"started", "line " + t->started_id, "exit"});
    CHECK(handle->id() == t->started_id);
  }
}

TEST_CASE("process runtime: a stop or kill asked for as soon as start "
          "returned reaches the agent",
          "[shim]") {
  // The shim drops signals that reach it before it reads its request: the
  // runtime holds them until the shim has reported the agent's start.
  scratch dir;
  auto rt = make_process_runtime();
  // The first attempt of each task meets a shim that is still starting,
  // the second one that is idle.
  for (int attempt = 1; attempt <= 2; ++attempt) {
    for (bool kill : {false, true}) {
      INFO("attempt " << attempt << (kill ? ", kill" : ", stop"));
      auto t = std::make_shared<told>();
      auto task = std::string{kill ? "k" : "s"};
      auto spec = spec_of(dir / (task + "/attempt-" + std::to_string(attempt)),
                          {"sleep", "600"}, attempt);
      spec.task_id = task;
      auto handle = rt->start(std::move(spec), told::callbacks(t));
      if (kill)
        handle->kill();
      else
        handle->stop(600s); // a kill after the grace would say signal 9
      auto out = t->exit.get();
      INFO(out.infrastructure_error);
      CHECK(out.infrastructure_error.empty());
      CHECK(out.signal == (kill ? SIGKILL : SIGTERM));
      std::lock_guard<std::mutex> guard{t->mtx};
      CHECK(t->order.front() == "started");
    }
  }
}

TEST_CASE("process runtime: a shim that never reports the agent's start is "
          "ended, and the agent it started with it",
          "[shim]") {
  // The stand-in starts `sleep 600`, records it and then neither reports
  // nor heeds SIGUSR1: the runtime kills it, and the agent its record
  // names, instead of leaving that agent running unwatched.
  scratch dir;
  process_runtime_options opts;
  opts.shim_path = std::string{TASKSUP_FIXTURES_DIR} + "/wedged_shim.py";
  // Long enough for the Python stand-in to start and record its agent even
  // on a loaded machine (SIGUSR1 before its first line would end it first).
  opts.shim_report_timeout = 2000ms;
  bool per_attempt = GENERATE(false, true);
  INFO("a shim per attempt: " << per_attempt);
  if (per_attempt)
    opts.shim_idle_timeout = 0ms;
  auto rt = make_process_runtime(std::move(opts));
  auto out = run_attempt(*rt, dir / "t/attempt-1", 1, {"true"});
  INFO(out.infrastructure_error);
  CHECK(out.infrastructure_error.find(
          "did not report the agent's start within 2000 ms") !=
        std::string::npos);
  auto rec = shim_of(dir / "t/attempt-1");
  CHECK(process_gone(rec.shim_pid));
  // Killed (a zombie until its new parent reaps it counts as gone).
  auto dead = [](pid_t pid) {
    auto stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    return stat.empty() || (close != std::string::npos &&
                            close + 2 < stat.size() && stat[close + 2] == 'Z');
  };
  CHECK(eventually([&] { return dead(rec.agent_pid); }, patience));
}

TEST_CASE("process runtime: while a shim that never reports is given its "
          "grace, the other attempts go on",
          "[shim]") {
  // The stand-in wedges for the task "wedged" and hands other tasks to the
  // real shim (named in `real-shim`). Once the runtime has asked the wedged one
  // to end (SIGUSR1, which it notes and ignores for its second of grace),
  // another task's attempt still ends and is reported: nothing waits for the
  // wedged shim, whose attempt is reported once it and its agent are gone.
  scratch dir;
  dir.write("real-shim", shim_program());
  process_runtime_options opts;
  opts.shim_path = std::string{TASKSUP_FIXTURES_DIR} + "/wedged_shim.py";
  // Long enough for the Python stand-in to start even on a loaded machine:
  // until its first line runs, SIGUSR1 would end it (its default action).
  opts.shim_report_timeout = 2000ms;
  auto rt = make_process_runtime(std::move(opts));
  std::mutex mtx;
  std::vector<std::string> ended;
  auto noting = [&](std::string name, outcome_wait& w) {
    auto cb = w.callbacks();
    cb.on_exit = [&mtx, &ended, name,
                  inner = std::move(cb.on_exit)](attempt_outcome out) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        ended.push_back(name);
      }
      inner(std::move(out));
    };
    return cb;
  };
  auto go = dir / "go";
  REQUIRE(::mkfifo(go.c_str(), 0600) == 0);
  outcome_wait other;
  auto other_spec =
    spec_of(dir / "other/attempt-1", {"sh", "-c", "read x < " + go});
  other_spec.task_id = "other";
  rt->start(std::move(other_spec), noting("other", other));
  outcome_wait wedged;
  auto wedged_spec = spec_of(dir / "wedged/attempt-1", {"true"});
  wedged_spec.task_id = "wedged";
  rt->start(std::move(wedged_spec), noting("wedged", wedged));
  REQUIRE(eventually([&] { return fs::exists(dir / "wedged/attempt-1/usr1"); },
                     patience));
  // Opening the fifo waits for the other agent to have it open.
  { std::ofstream{go} << "go\n"; }
  auto out = other.get();
  CHECK(out.exit_code == 0);
  CHECK(out.infrastructure_error.empty());
  auto stuck = wedged.get();
  CHECK(stuck.infrastructure_error.find(
          "did not report the agent's start within 2000 ms") !=
        std::string::npos);
  CHECK(process_gone(shim_of(dir / "wedged/attempt-1").shim_pid));
  std::lock_guard<std::mutex> guard{mtx};
  CHECK(ended == std::vector<std::string>{"other", "wedged"});
}

TEST_CASE("run: node.json's process.shim_idle_timeout_s 0 gives every attempt "
          "a shim of its own, the default one shim per task",
          "[shim]") {
  for (bool per_attempt : {false, true}) {
    INFO("shim_idle_timeout_s 0: " << per_attempt);
    scratch dir;
    fs::create_directories(dir / "config");
    dir.write("config/node.json",
              per_attempt ? R"({"process": {"shim_idle_timeout_s": 0}})"
                          : "{}");
    fs::copy_file(config_dir() + "/classifier.json",
                  dir / "config/classifier.json");
    auto agent = dir.write("agent", "#!/bin/sh\n"
                                    "[ \"$TASKSUP_ATTEMPT\" -ge 2 ] && exit 0\n"
                                    "echo 'error: transient failure' >&2\n"
                                    "exit 1\n");
    fs::permissions(agent, fs::perms::owner_all);
    auto task = dir.write("t.json", R"({"id": "t", "prompt": "p",
      "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": ")" +
                                      agent + R"(",
        "prompt_as_argument": false}]},
      "supervisor": {"backoff_base_seconds": 0}})");
    tasksup_child run{
      dir,
      "run",
      {"run", "--config", dir / "config", "--work-dir", dir / "work", task}};
    INFO(run.err());
    REQUIRE(run.wait(patience) == 0);
    auto first = shim_of(dir / "work/t/attempt-1");
    auto second = shim_of(dir / "work/t/attempt-2");
    CHECK((first.shim_pid != second.shim_pid) == per_attempt);
  }
}

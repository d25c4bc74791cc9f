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
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

using namespace std::chrono_literals;
using tasksup::attempt_outcome;
using tasksup::runtime::attempt_callbacks;
using tasksup::runtime::attempt_handle;
using tasksup::runtime::attempt_spec;
using tasksup::runtime::container_runtime;
using tasksup::runtime::make_process_runtime;
using tasksup::runtime::process_runtime_options;

namespace fs = std::filesystem;

namespace {

/// Generous bound for anything that should take milliseconds.
constexpr auto patience = 60s;

std::string fixture(const std::string& name) {
  return std::string{TASKSUP_FIXTURES_DIR} + "/" + name;
}

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

// A fresh directory under $TMPDIR (or /tmp), removed at scope exit.
struct temp_dir {
  std::string path;

  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
      std::string{base != nullptr ? base : "/tmp"} + "/tasksup-process-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }

  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Collects one attempt's lines and outcome; waits on a condition variable.
struct recorder {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::string> lines;
  /// The stream of each line in `lines`.
  std::vector<tasksup::runtime::output_stream> streams;
  std::vector<std::string> notices;
  std::optional<attempt_outcome> outcome;
  int exit_calls = 0;

  attempt_callbacks callbacks() {
    attempt_callbacks cb;
    cb.on_line = [this](tasksup::runtime::output_stream stream,
                        std::string_view line) {
      std::lock_guard<std::mutex> guard{mtx};
      lines.emplace_back(line);
      streams.push_back(stream);
      cv.notify_all();
      return true;
    };
    cb.on_notice = [this](std::string_view text) {
      std::lock_guard<std::mutex> guard{mtx};
      notices.emplace_back(text);
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

  // Waits for a line equal to `text` (e.g. a fixture's "ready").
  void wait_for_line(const std::string& text) {
    std::unique_lock<std::mutex> guard{mtx};
    REQUIRE(cv.wait_for(guard, patience, [&] {
      return std::find(lines.begin(), lines.end(), text) != lines.end() ||
             outcome.has_value();
    }));
    REQUIRE_FALSE(outcome.has_value());
  }

  std::optional<std::string> line_starting(const std::string& prefix) {
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& line : lines)
      if (line.rfind(prefix, 0) == 0)
        return line.substr(prefix.size());
    return std::nullopt;
  }
};

struct fixture_env {
  temp_dir dir;
  std::vector<std::string> warnings;
  std::mutex warn_mtx;
  std::shared_ptr<container_runtime> rt;
  int next_attempt = 1;

  fixture_env() {
    process_runtime_options opts;
    opts.on_warning = [this](std::string_view msg) {
      std::lock_guard<std::mutex> guard{warn_mtx};
      warnings.emplace_back(msg);
    };
    rt = make_process_runtime(std::move(opts));
  }

  attempt_spec spec(std::vector<std::string> argv) {
    attempt_spec s;
    s.task_id = "task-" + std::to_string(::getpid());
    s.attempt = next_attempt++;
    s.agent_id = "test-agent";
    s.argv = std::move(argv);
    s.attempt_dir = dir.path + "/attempt-" + std::to_string(s.attempt);
    return s;
  }

  attempt_spec sh(const std::string& script,
                  std::vector<std::string> args = {}) {
    std::vector<std::string> argv{"/bin/sh", fixture(script)};
    argv.insert(argv.end(), args.begin(), args.end());
    return spec(std::move(argv));
  }

  attempt_outcome run(attempt_spec s, recorder& rec) {
    rt->start(std::move(s), rec.callbacks());
    return rec.wait();
  }
};

bool group_gone(pid_t pgid) {
  return ::kill(-pgid, 0) != 0 && errno == ESRCH;
}

bool tail_has(const attempt_outcome& out, const std::string& text) {
  return std::any_of(out.tail.begin(), out.tail.end(), [&](auto& line) {
    return line.find(text) != std::string::npos;
  });
}

} // namespace

TEST_CASE("process runtime reports exit codes") {
  fixture_env env;
  CHECK(env.rt->name() == "process");
  for (int code : {0, 1, 3}) {
    recorder rec;
    auto s = env.sh("exit_with.sh", {std::to_string(code)});
    auto out = env.run(s, rec);
    CHECK(out.exit_code == code);
    CHECK(out.signal == 0);
    CHECK_FALSE(out.oom_killed);
    CHECK(out.infrastructure_error.empty());
    CHECK(out.succeeded() == (code == 0));
    CHECK(out.tail ==
          std::vector<std::string>{"exiting with " + std::to_string(code)});
    CHECK(out.log_path == s.attempt_dir + "/output.log");
    CHECK(read_all(out.log_path) ==
          "exiting with " + std::to_string(code) + "\n");
    CHECK(out.duration_s > 0);
    CHECK(out.duration_s < 60);
    CHECK(rec.exit_calls == 1);
  }
}

TEST_CASE("process runtime captures rate-limit text from stderr") {
  fixture_env env;
  recorder rec;
  auto out = env.run(env.sh("rate_limited.sh"), rec);
  CHECK(out.exit_code == 1);
  REQUIRE(out.tail.size() == 2);
  CHECK(out.tail[0] == "calling the API");
  CHECK(out.tail[1].find("429 Too Many Requests") != std::string::npos);
  CHECK(rec.lines == out.tail);
}

TEST_CASE("process runtime reports a missing agent as exit 127") {
  fixture_env env;
  recorder rec;
  auto s = env.spec({"tasksup-no-such-agent-cli", "--flag"});
  auto out = env.run(s, rec);
  CHECK(out.exit_code == 127);
  CHECK(out.signal == 0);
  CHECK(out.infrastructure_error.empty());
  CHECK(out.tail == std::vector<std::string>{
                      "tasksup: tasksup-no-such-agent-cli: command not found"});
  CHECK(read_all(out.log_path).find("command not found") != std::string::npos);
  CHECK(rec.exit_calls == 1);

  recorder abs;
  auto out2 = env.run(env.spec({"/nonexistent/dir/agent"}), abs);
  CHECK(out2.exit_code == 127);
  CHECK(tail_has(out2, "command not found"));
}

TEST_CASE("process runtime reports a non-executable agent as exit 126") {
  fixture_env env;
  recorder rec;
  auto path = fixture("not_executable.sh");
  REQUIRE(::access(path.c_str(), X_OK) != 0);
  auto out = env.run(env.spec({path}), rec);
  CHECK(out.exit_code == 126);
  CHECK(out.infrastructure_error.empty());
  REQUIRE(out.tail.size() == 1);
  CHECK(out.tail[0] == "tasksup: " + path + ": not executable");
  // Not worded like a fatal "permission denied".
  CHECK(out.tail[0].find("ermission") == std::string::npos);
}

TEST_CASE("process runtime reports a bad working directory as an "
          "infrastructure error") {
  fixture_env env;
  recorder rec;
  auto s = env.sh("exit_with.sh", {"0"});
  s.workdir = env.dir.path + "/does-not-exist";
  auto out = env.run(s, rec);
  CHECK_FALSE(out.succeeded());
  CHECK(out.infrastructure_error.find("working directory") !=
        std::string::npos);
  CHECK(out.infrastructure_error.find("No such file") != std::string::npos);

  recorder empty;
  auto out2 = env.run(env.spec({}), empty);
  CHECK_FALSE(out2.infrastructure_error.empty());
  CHECK(empty.exit_calls == 1);
}

TEST_CASE("process runtime reports death by signal") {
  fixture_env env;
  SECTION("SIGKILL is 137 with signal 9") {
    recorder rec;
    auto out = env.run(env.sh("kill_self.sh", {"KILL"}), rec);
    CHECK(out.exit_code == 137);
    CHECK(out.signal == SIGKILL);
    CHECK(out.tail == std::vector<std::string>{"about to die by SIGKILL"});
  }
  SECTION("SIGSEGV is 139 with signal 11") {
    recorder rec;
    auto out = env.run(env.sh("kill_self.sh", {"SEGV"}), rec);
    CHECK(out.exit_code == 128 + SIGSEGV);
    CHECK(out.signal == SIGSEGV);
  }
}

TEST_CASE("process runtime detects an OOM kill under a memory limit") {
  fixture_env env;
  recorder rec;
  auto s = env.sh("allocate.sh");
  s.memory_limit_mb = 32;
  auto out = env.run(s, rec);
  std::vector<std::string> warnings;
  {
    std::lock_guard<std::mutex> guard{env.warn_mtx};
    warnings = env.warnings;
  }
  auto refused = std::any_of(warnings.begin(), warnings.end(), [](auto& w) {
    return w.find("memory limit") != std::string::npos;
  });
  if (refused) {
    WARN("kernel refused the memory cgroup, OOM test skipped: "
         << warnings.front());
    return;
  }
  CHECK(out.oom_killed);
  CHECK(out.exit_code == 137); // tail was SIGKILLed by the OOM killer
  CHECK_FALSE(out.succeeded());
  CHECK(tail_has(out, "allocating"));
  // The attempt's cgroup is gone afterwards.
  std::ifstream in{"/proc/self/cgroup"};
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find(":memory:");
    if (pos == std::string::npos)
      continue;
    auto own = line.substr(pos + 8);
    if (own == "/")
      own.clear();
    auto name = s.task_id + "-" + std::to_string(s.attempt);
    CHECK_FALSE(fs::exists("/sys/fs/cgroup/memory" + own + "/tasksup/" + name));
    CHECK_FALSE(fs::exists("/sys/fs/cgroup/memory/tasksup/" + name));
  }
}

TEST_CASE("process runtime captures long lines and binary output") {
  fixture_env env;
  recorder rec;
  auto out = env.run(env.sh("output.sh"), rec);
  CHECK(out.exit_code == 0);
  std::string big(1024 * 1024, 'x');
  std::string binary{"bin\x01\xff\x00"
                     "end",
                     9};
  REQUIRE(out.tail.size() == 5);
  CHECK(out.tail[0] == "first");
  CHECK(out.tail[1] == big.substr(0, 4096));
  CHECK(out.tail[2] == binary);
  CHECK(out.tail[3] == "crlf line");
  CHECK(out.tail[4] == "last without newline");
  // Lines as delivered: the 1 MiB line cut to the 4 KiB a line may show,
  // the rest counted once in the notice; the log keeps every byte.
  REQUIRE(rec.lines.size() == 5);
  CHECK(rec.lines[0] == "first");
  CHECK(rec.lines[1] == big.substr(0, 4096));
  CHECK(rec.lines[2] == binary);
  CHECK(rec.lines[4] == "last without newline");
  for (auto s : rec.streams)
    CHECK(s == tasksup::runtime::output_stream::out);
  REQUIRE(rec.notices.size() == 1);
  CHECK(rec.notices[0].find(std::to_string(big.size() - 4096) +
                            " bytes of output in 1 lines were not shown") !=
        std::string::npos);
  CHECK(read_all(out.log_path) == "first\n" + big + "\n" + binary +
                                    "\ncrlf line\r\nlast without newline");
}

TEST_CASE("process runtime keeps stdout and stderr apart") {
  fixture_env env;
  recorder rec;
  auto out = env.run(env.sh("streams.sh"), rec);
  CHECK(out.exit_code == 0);
  REQUIRE(rec.lines.size() == 2);
  for (std::size_t i = 0; i < rec.lines.size(); ++i)
    CHECK(rec.streams[i] == (rec.lines[i] == "to stderr"
                               ? tasksup::runtime::output_stream::err
                               : tasksup::runtime::output_stream::out));
  CHECK(std::count(rec.lines.begin(), rec.lines.end(), "to stdout") == 1);
  CHECK(std::count(rec.lines.begin(), rec.lines.end(), "to stderr") == 1);
  CHECK(rec.notices.empty());
}

TEST_CASE("process runtime stops an attempt gracefully with SIGTERM") {
  fixture_env env;
  recorder rec;
  auto handle = env.rt->start(env.sh("trap_term.sh"), rec.callbacks());
  auto pgid = static_cast<pid_t>(std::stol(handle->id()));
  rec.wait_for_line("ready");
  handle->stop(30s);
  auto out = rec.wait();
  CHECK(out.exit_code == 42);
  CHECK(out.signal == 0);
  CHECK(tail_has(out, "got TERM"));
  CHECK(group_gone(pgid));
  // After the end, control is a no-op.
  handle->stop(1s);
  handle->kill();
  CHECK(rec.exit_calls == 1);
}

TEST_CASE("process runtime stops and kills an attempt started just now") {
  // Control that arrives before the attempt produced any event.
  fixture_env env;
  SECTION("stop") {
    recorder rec;
    auto handle =
      env.rt->start(env.spec({"/bin/sleep", "600"}), rec.callbacks());
    auto pgid = static_cast<pid_t>(std::stol(handle->id()));
    handle->stop(30s);
    auto out = rec.wait();
    CHECK(out.signal == SIGTERM);
    CHECK(out.exit_code == 128 + SIGTERM);
    CHECK(group_gone(pgid));
  }
  SECTION("kill") {
    recorder rec;
    auto handle =
      env.rt->start(env.spec({"/bin/sleep", "600"}), rec.callbacks());
    handle->kill();
    auto out = rec.wait();
    CHECK(out.signal == SIGKILL);
    CHECK(out.exit_code == 137);
  }
}

TEST_CASE("process runtime kills a TERM-ignoring attempt after the grace") {
  fixture_env env;
  recorder rec;
  auto handle = env.rt->start(env.sh("ignore_term.sh"), rec.callbacks());
  auto pgid = static_cast<pid_t>(std::stol(handle->id()));
  rec.wait_for_line("ready");
  auto t0 = std::chrono::steady_clock::now();
  handle->stop(300ms);
  auto out = rec.wait();
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  CHECK(out.exit_code == 137);
  CHECK(out.signal == SIGKILL);
  CHECK(group_gone(pgid));
}

TEST_CASE("process runtime kill leaves no process of the group behind") {
  fixture_env env;
  recorder rec;
  auto handle = env.rt->start(env.sh("background_child.sh"), rec.callbacks());
  auto pgid = static_cast<pid_t>(std::stol(handle->id()));
  rec.wait_for_line("ready");
  auto grandchild = rec.line_starting("grandchild ");
  REQUIRE(grandchild);
  auto gpid = static_cast<pid_t>(std::stol(*grandchild));
  REQUIRE(::kill(gpid, 0) == 0);
  handle->kill();
  auto out = rec.wait();
  CHECK(out.exit_code == 137);
  CHECK(out.signal == SIGKILL);
  CHECK(group_gone(pgid));
  CHECK((::kill(gpid, 0) != 0 && errno == ESRCH));
}

TEST_CASE("process runtime ends a grandchild left behind by an exited agent") {
  fixture_env env;
  recorder rec;
  auto handle =
    env.rt->start(env.sh("background_child.sh", {"exit"}), rec.callbacks());
  auto pgid = static_cast<pid_t>(std::stol(handle->id()));
  auto out = rec.wait();
  CHECK(out.exit_code == 0);
  CHECK(tail_has(out, "ready"));
  CHECK(group_gone(pgid));
  // Ended by the group kill at the agent's exit, not by the drain timeout.
  std::lock_guard<std::mutex> guard{env.warn_mtx};
  CHECK(env.warnings.empty());
}

TEST_CASE("process runtime collects artifacts") {
  fixture_env env;
  recorder rec;
  auto s = env.sh("make_artifacts.sh");
  auto out = env.run(s, rec);
  CHECK(out.exit_code == 0);
  CHECK(out.artifacts ==
        std::vector<std::string>{s.attempt_dir + "/artifacts/report.txt",
                                 s.attempt_dir + "/artifacts/sub/data.bin"});
  CHECK(read_all(out.artifacts[0]) == "report\n");
}

TEST_CASE("process runtime reports no artifacts for an empty artifacts "
          "directory") {
  fixture_env env;
  SECTION("nothing in it") {
    recorder rec;
    auto out = env.run(env.spec({"/bin/true"}), rec);
    CHECK(out.exit_code == 0);
    CHECK(out.artifacts.empty());
  }
  SECTION("only an empty subdirectory and a symlink") {
    recorder rec;
    auto out = env.run(env.spec({"/bin/sh", "-c",
                                 "mkdir \"$TASKSUP_ARTIFACTS_DIR/sub\" && "
                                 "ln -s /etc/hostname "
                                 "\"$TASKSUP_ARTIFACTS_DIR/link\""}),
                       rec);
    CHECK(out.exit_code == 0);
    CHECK(out.artifacts.empty());
  }
}

namespace {

// Ignores SIGPIPE and a real-time signal, handles SIGUSR1 and blocks SIGUSR2
// in the calling thread, as a supervisor embedding the runtime might;
// restores all of it on destruction.
struct unusual_signals {
  int rt_signal = SIGRTMIN + 4;
  struct sigaction old_pipe {};
  struct sigaction old_rt {};
  struct sigaction old_usr1 {};
  sigset_t old_mask{};

  unusual_signals() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    struct sigaction handle {};
    handle.sa_handler = [](int) {};
    ::sigaction(SIGPIPE, &ignore, &old_pipe);
    ::sigaction(rt_signal, &ignore, &old_rt);
    ::sigaction(SIGUSR1, &handle, &old_usr1);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR2);
    ::pthread_sigmask(SIG_BLOCK, &block, &old_mask);
  }

  ~unusual_signals() {
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::sigaction(SIGUSR1, &old_usr1, nullptr);
    ::sigaction(rt_signal, &old_rt, nullptr);
    ::sigaction(SIGPIPE, &old_pipe, nullptr);
  }
};

} // namespace

TEST_CASE("process runtime starts the agent with default signal handling and "
          "nothing blocked") {
  // Ignored signals and the mask survive exec: an agent that inherited an
  // ignored SIGPIPE would not die writing to a closed pipe.
  fixture_env env;
  recorder rec;
  attempt_outcome out;
  {
    unusual_signals sigs;
    out = env.run(env.spec({"/bin/cat", "/proc/self/status"}), rec);
  }
  CHECK(out.exit_code == 0);
  REQUIRE(rec.line_starting("SigIgn:\t"));
  CHECK(rec.line_starting("SigIgn:\t") == "0000000000000000");
  CHECK(rec.line_starting("SigBlk:\t") == "0000000000000000");
  CHECK(rec.line_starting("SigCgt:\t") == "0000000000000000");
}

TEST_CASE("process runtime passes the promised environment, argv and a "
          "fresh workspace") {
  ::setenv("TASKSUP_TEST_SECRET", "must-not-leak", 1);
  fixture_env env;
  ::unsetenv("TASKSUP_TEST_SECRET");
  auto s = env.sh("show_env.sh", {"two words", "$HOME", "*"});
  s.env["FOO"] = "bar baz";
  s.config_dir = "/etc/agent-config";
  s.feedback = "attempt: 1 failed";
  // A stale file from an earlier run must not be seen.
  fs::create_directories(s.attempt_dir + "/workspace");
  std::ofstream{s.attempt_dir + "/workspace/stale"} << "old";
  recorder rec;
  auto out = env.run(s, rec);
  CHECK(out.exit_code == 0);
  CHECK(rec.line_starting("TASK=") == s.task_id);
  CHECK(rec.line_starting("ATTEMPT=") == std::to_string(s.attempt));
  CHECK(rec.line_starting("ARTIFACTS=") == s.attempt_dir + "/artifacts");
  CHECK(rec.line_starting("DONE_FILE=") ==
        s.attempt_dir + "/artifacts/tasksup-done");
  CHECK(rec.line_starting("CONFIG=") == "/etc/agent-config");
  // The feedback is written where the attempt runs, and named.
  CHECK(rec.line_starting("FEEDBACK=") == s.attempt_dir + "/feedback.txt");
  CHECK(rec.line_starting("FEEDBACK_TEXT=") == "attempt: 1 failed");
  CHECK(rec.line_starting("FOO=") == "bar baz");
  CHECK(rec.line_starting("SECRET=") == "unset");
  CHECK(rec.line_starting("PATH_SET=") == "yes");
  CHECK(rec.line_starting("ARGC=") == "3");
  std::vector<std::string> args;
  for (auto& line : rec.lines)
    if (line.rfind("ARG=", 0) == 0)
      args.push_back(line.substr(4));
  CHECK(args == std::vector<std::string>{"two words", "$HOME", "*"});
  CHECK(rec.line_starting("PWD=") == s.attempt_dir + "/workspace");
  CHECK(rec.line_starting("ENTRIES=") == "0");
  CHECK(fs::exists(s.attempt_dir + "/workspace/left-behind"));

  // Without config_dir the variable is absent; an explicit workdir is used.
  auto s2 = env.sh("show_env.sh");
  s2.workdir = env.dir.path;
  recorder rec2;
  env.run(s2, rec2);
  CHECK(rec2.line_starting("CONFIG=") == "unset");
  CHECK(rec2.line_starting("FEEDBACK=") == "unset");
  CHECK(rec2.line_starting("PWD=") == env.dir.path);
}

TEST_CASE("process runtime runs 200 concurrent attempts on one reactor") {
  fixture_env env;
  constexpr int count = 200;
  std::vector<std::unique_ptr<recorder>> recs;
  std::vector<attempt_spec> specs;
  for (int i = 0; i < count; ++i) {
    recs.push_back(std::make_unique<recorder>());
    specs.push_back(env.sh("exit_with.sh", {std::to_string(i % 7)}));
  }
  for (int i = 0; i < count; ++i)
    env.rt->start(specs[static_cast<std::size_t>(i)],
                  recs[static_cast<std::size_t>(i)]->callbacks());
  for (int i = 0; i < count; ++i) {
    auto& rec = *recs[static_cast<std::size_t>(i)];
    auto out = rec.wait();
    CHECK(out.exit_code == i % 7);
    CHECK(out.tail ==
          std::vector<std::string>{"exiting with " + std::to_string(i % 7)});
    CHECK(rec.exit_calls == 1);
  }
}

TEST_CASE("destroying the process runtime kills and reports running "
          "attempts") {
  recorder rec;
  pid_t pgid = 0;
  {
    fixture_env env;
    auto handle = env.rt->start(env.sh("ignore_term.sh"), rec.callbacks());
    pgid = static_cast<pid_t>(std::stol(handle->id()));
    rec.wait_for_line("ready");
  }
  auto out = rec.wait();
  CHECK(out.exit_code == 137);
  CHECK(rec.exit_calls == 1);
  CHECK(group_gone(pgid));
}

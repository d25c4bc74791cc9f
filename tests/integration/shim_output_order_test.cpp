// The order of an agent's output across stdout and stderr through
// tasksup-shim when its reader (the process runtime) falls behind: a last
// line on stderr after a flood on stdout must reach the reader after the
// flood, or it falls out of the tail the classifier scans (the cause of the
// flaky 1-GiB flood tests under load). The reader here is the test itself,
// reading the shim's two pipes as the runtime does: whatever is there.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace tasksup::test;
namespace fs = std::filesystem;

TEST_CASE("shim: a last line on stderr after a stdout flood reaches a reader "
          "that fell behind after the flood",
          "[shim]") {
  scratch dir;
  auto attempt = dir / "attempt";
  fs::create_directories(attempt);
  auto done = dir / "agent-done";
  const std::string last = "error: invalid api key (the real last line)";
  // 99 kB of stdout (3,000 whole lines): more than the reader's pipe holds,
  // less than all the buffers on the way. While nobody reads, the agent
  // writes it all and then its last line; part of the stdout waits in the
  // shim and in the agent's pipe.
  constexpr std::size_t flood = 99'000;
  auto shim = fs::path{TASKSUP_BINARY}.parent_path() / "tasksup-shim";
  std::vector<std::string> args = {
    shim.string(),
    "--attempt-dir",
    attempt,
    "--orphan",
    "keep",
    "--",
    "/bin/sh",
    "-c",
    "yes 'a short line from a chatty agent' | head -c " +
      std::to_string(flood) + "; echo \"$2\" >&2; : > \"$1\"; exit 3",
    "agent",
    done,
    last};
  int out[2];
  int err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  // The shim reports the agent's pid on fd 3.
  posix_spawn_file_actions_addopen(&actions, 3, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(
    ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);

  // The agent has written everything, its last line included.
  REQUIRE(eventually([&] { return fs::exists(done); }, 60s));
  // Before the fix the shim read that line at once and passed it on while
  // it still held stdout; give it the chance to (the shim logs what it
  // reads). With the fix it reads nothing more until its reader has taken
  // what it holds, so this wait ends unfulfilled; nothing below depends on
  // it.
  eventually(
    [&] {
      return slurp(attempt + "/output.log").find(last) != std::string::npos;
    },
    1s);

  // Read as a runtime does, whatever either pipe has, stderr looked at
  // first: the last line must still come after the whole flood.
  std::string got_out;
  std::string got_err;
  std::size_t out_before_last = std::string::npos;
  char buf[65536];
  bool open_out = true;
  bool open_err = true;
  auto deadline = steady::now() + 60s;
  while ((open_out || open_err) && steady::now() < deadline) {
    pollfd fds[2] = {{open_err ? err[0] : -1, POLLIN, 0},
                     {open_out ? out[0] : -1, POLLIN, 0}};
    ::poll(fds, 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0)
        continue;
      auto n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? got_err : got_out).append(buf, static_cast<std::size_t>(n));
        if (i == 0 && out_before_last == std::string::npos &&
            got_err.find(last) != std::string::npos)
          out_before_last = got_out.size();
      } else if (n == 0) {
        (i == 0 ? open_err : open_out) = false;
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(got_err == last + "\n");
  CHECK(got_out.size() == flood);
  // When the last line arrived, the reader had the whole flood already.
  CHECK(out_before_last == flood);
  // The shim recorded the agent's exit.
  CHECK(slurp(attempt + "/exit.status").find("3") != std::string::npos);
}

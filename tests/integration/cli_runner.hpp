#pragma once

// Runs the real tasksup binary as a child process for CLI tests: arguments
// as given (no shell), `input` written to its stdin, stdout and stderr
// captured separately, exit status returned. Uses poll so that a large input
// and the child's output cannot deadlock each other.

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace tasksup::test {

/// What a finished child process left behind.
struct cli_result {
  /// Exit status, or 128+N when killed by signal N.
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs TASKSUP_BINARY with `args`, feeding `input` on stdin. `env` entries
/// ("NAME=value") are added to the inherited environment.
inline cli_result run_tasksup(const std::vector<std::string>& args,
                              const std::string& input = {},
                              const std::vector<std::string>& env = {}) {
  int in_pipe[2];
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string{"pipe: "} + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<std::string> argv_store{TASKSUP_BINARY};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_store)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  // `env` entries replace inherited ones of the same name.
  auto name_of = [](const std::string& entry) {
    return entry.substr(0, entry.find('='));
  };
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry{*e};
    bool replaced = false;
    for (const auto& extra : env)
      replaced = replaced || name_of(extra) == name_of(entry);
    if (!replaced)
      env_store.push_back(std::move(entry));
  }
  env_store.insert(env_store.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& entry : env_store)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  int rc =
    ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw std::runtime_error(std::string{"posix_spawn: "} + std::strerror(rc));
  }
  // Writing to a child that exited early must not kill the test with SIGPIPE.
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  ::fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  cli_result result;
  std::size_t written = 0;
  int in_fd = in_pipe[1];
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  int out_fd = out_pipe[0];
  int err_fd = err_pipe[0];
  char buf[65536];
  while (in_fd >= 0 || out_fd >= 0 || err_fd >= 0) {
    pollfd fds[3] = {
      {in_fd, POLLOUT, 0}, {out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (in_fd >= 0 && fds[0].revents != 0) {
      auto n = ::write(in_fd, input.data() + written, input.size() - written);
      if (n > 0)
        written += static_cast<std::size_t>(n);
      if ((n < 0 && errno != EAGAIN) || written == input.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
    for (int k = 1; k < 3; ++k) {
      int& fd = k == 1 ? out_fd : err_fd;
      if (fd < 0 || fds[k].revents == 0)
        continue;
      auto n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        (k == 1 ? result.out : result.err).append(buf, n);
      } else if (n == 0 || errno != EINTR) {
        ::close(fd);
        fd = -1;
      }
    }
  }
  ::sigaction(SIGPIPE, &previous, nullptr);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(wstatus))
    result.status = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus))
    result.status = 128 + WTERMSIG(wstatus);
  return result;
}

/// A scratch directory, removed with everything in it at scope exit.
class scratch_dir {
public:
  scratch_dir() {
    std::string tmpl =
      (std::filesystem::temp_directory_path() / "tasksup-cli-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error(std::string{"mkdtemp: "} + std::strerror(errno));
    path_ = tmpl;
  }

  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  const std::string& path() const { return path_; }

  /// Writes `content` to `rel` (creating directories); returns the path.
  std::string write(const std::string& rel, const std::string& content) const {
    auto full = std::filesystem::path{path_} / rel;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream out{full, std::ios::binary};
    out << content;
    return full.string();
  }

private:
  std::string path_;
};

} // namespace tasksup::test

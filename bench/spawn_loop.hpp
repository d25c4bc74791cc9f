#pragma once

#include "bench_util.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::bench {

/// What `spawn_loop` measured.
struct spawn_loop_result {
  bool ok = false;
  double seconds = 0;
};

/// Spawns `binary` (no arguments, this process's environment) `n` times in a
/// row with posix_spawn and waits for each with waitpid: the cheapest way to
/// run a process repeatedly, the floor the process runtime is compared with.
inline spawn_loop_result spawn_loop(const std::string& binary,
                                    std::uint64_t n) {
  spawn_loop_result result;
  char* argv[] = {const_cast<char*>(binary.c_str()), nullptr};
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    pid_t pid = 0;
    if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv, environ) != 0)
      return result;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
  }
  result.seconds = seconds_since(start);
  result.ok = true;
  return result;
}

/// The same loop with fork + execve instead of posix_spawn (which glibc runs
/// as clone(CLONE_VM | CLONE_VFORK): no page tables copied). Shows how much
/// of a runtime's cost is fork itself.
inline spawn_loop_result fork_loop(const std::string& binary, std::uint64_t n) {
  spawn_loop_result result;
  char* argv[] = {const_cast<char*>(binary.c_str()), nullptr};
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid < 0)
      return result;
    if (pid == 0) {
      ::execve(binary.c_str(), argv, environ);
      ::_exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
  }
  result.seconds = seconds_since(start);
  result.ok = true;
  return result;
}

/// Runs `argv` (looked up in PATH) with stdout and stderr on /dev/null and
/// waits for it; returns its exit status (128+N for signal N) or -1 when it
/// could not be started.
inline int run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  auto rc =
    posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace tasksup::bench

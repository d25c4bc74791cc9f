#pragma once

// The process runtime's shims: the tasksup-shim program and how it is
// started, the pool of serving shims (`tasksup-shim --serve`, one per task,
// kept idle between the task's attempts), and the ends of shims that did
// not report the agent's start. Private to the runtime.

#include "process_spawn.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <sys/types.h>

namespace tasksup::runtime::detail {

class attempt_io;
class warning_sink;

/// A `tasksup-shim --serve` process (our child): it runs the attempts of
/// the task whose attempt directories are in `dir`, one at a time, asked
/// through `sock`.
struct served_shim {
  pid_t pid = -1;
  int pidfd = -1;
  int sock = -1;
  std::string dir;
  std::chrono::steady_clock::time_point idle_since;
};

/// Kills and reaps a shim that runs nothing (any thread).
void discard_shim(served_shim& s);

/// Ends a shim (`pid`, watched through `pidfd`) that did not report the
/// start of the agent of `attempt_dir`'s attempt, and that agent with it;
/// waits for it (at most `unreported_shim_grace_ms`) and reaps it.
void stop_unreported_shim(pid_t pid, int pidfd, const std::string& attempt_dir);

/// Kills the agent group that the shim `pid` recorded in `attempt_dir`,
/// once that shim is gone (it would otherwise run on, unwatched).
void kill_recorded_agent(pid_t pid, const std::string& attempt_dir);

/// The pid in a shim's report (`digits`, the line without its newline);
/// -1 when it is not one.
pid_t report_pid(std::string_view digits);

/// Reads the shim's report (the agent's pid and a newline) from `fd`:
/// the pid, 0 when the agent could not start, -1 when the shim said nothing
/// (it failed before starting the agent), -2 when it did not answer in time.
pid_t read_shim_report(int fd, std::chrono::milliseconds timeout);

/// The tasksup-shim program and what every shim is started with: the
/// inherited environment, /dev/null, the descriptor limit, child stacks.
class shim_launcher {
public:
  shim_launcher() = default;
  shim_launcher(const shim_launcher&) = delete;
  shim_launcher& operator=(const shim_launcher&) = delete;
  ~shim_launcher() { close_fd(devnull_fd_); }

  /// Finds the program and prepares the rest; returns why it cannot be
  /// used (empty when it can).
  std::string init(const process_runtime_options& options, warning_sink& warn);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& base_env() const {
    return base_env_;
  }
  int devnull() const { return devnull_fd_; }
  int max_fd() const { return max_fd_; }
  child_stack_pool& stacks() { return stacks_; }

private:
  void raise_fd_limit(warning_sink& warn);

  /// The tasksup-shim program.
  std::string path_;
  std::map<std::string, std::string> base_env_;
  int max_fd_ = 1024;
  int devnull_fd_ = -1;
  child_stack_pool stacks_;
};

/// Serving shims: started for a task, idle between its attempts (taken on
/// any thread, given back on the reactor thread), retired once idle for
/// longer than allowed, reaped once they exited.
class shim_pool {
public:
  /// Retired shims are watched through `io`, under ids from `ids` (the
  /// reactor's, so they never collide with an attempt's).
  shim_pool(const process_runtime_options& options, shim_launcher& program,
            attempt_io& io, std::atomic<std::uint64_t>& ids)
    : options_(options), program_(program), io_(io), ids_(ids) {}

  /// Starts `tasksup-shim --serve dir`; `error` says why not.
  std::optional<served_shim> spawn(const std::string& dir, std::string& error);

  /// The idle shim serving `dir`, taken out of the pool (any thread).
  std::optional<served_shim> take_idle(const std::string& dir);

  /// Reactor thread: back to the pool when `reusable` (and no other shim
  /// serves its task), else retired.
  void release(served_shim s, bool reusable);

  /// Reactor thread: closes its socket (it exits) and reaps it once it has.
  void retire(served_shim s);

  /// Reactor thread: the exit of the retired shim watched as `id` (true
  /// when `id` is one): it is reaped.
  bool retired_exited(std::uint64_t id);

  /// When to look for shims idle for too long, if any is idle.
  std::optional<std::chrono::steady_clock::time_point> next_check() const {
    return idle_check_at_;
  }

  /// Reactor thread: retires the shims idle for longer than allowed (all of
  /// them when `all`).
  void expire_idle(bool all);

  /// Reactor thread, as it ends: every shim is retired, given a second to
  /// exit and reaped.
  void close();

private:
  const process_runtime_options& options_;
  shim_launcher& program_;
  attempt_io& io_;
  std::atomic<std::uint64_t>& ids_;

  /// Idle serving shims by the directory they serve.
  std::mutex mtx_;
  std::unordered_map<std::string, served_shim> idle_;

  // Reactor thread only.
  /// Retired serving shims until they are reaped, by epoll id.
  std::unordered_map<std::uint64_t, served_shim> retiring_;
  /// When to look for serving shims idle for too long.
  std::optional<std::chrono::steady_clock::time_point> idle_check_at_;
};

} // namespace tasksup::runtime::detail

#pragma once

// One attempt of the process runtime, as its reactor keeps it, and what
// every part of the reactor shares: the clock, the epoll keys, the pidfd
// calls and the warning sink. Private to the runtime.

#include "attempt_adoption.hpp"
#include "memory_cgroup.hpp"
#include "process_spawn.hpp"
#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

using clock_type = std::chrono::steady_clock;

/// At most this many artifact paths are reported per attempt.
inline constexpr std::size_t max_artifacts = 10000;

/// Bytes read from one pipe per reactor turn, so one chatty attempt cannot
/// starve the others.
inline constexpr std::size_t max_read_per_turn = 1024 * 1024;

/// How often to look again for a killed process group or cgroup to vanish.
inline constexpr std::chrono::milliseconds poll_interval{10};

/// How long a shim that did not report the agent's start is given to end
/// once told to (SIGUSR1) before it is killed.
inline constexpr int unreported_shim_grace_ms = 1000;

// Epoll keys: attempt id << 2 | kind. Id 0 is the wake-up eventfd.
inline constexpr std::uint64_t kind_wake = 0;
inline constexpr std::uint64_t kind_exit = 1;
inline constexpr std::uint64_t kind_output = 2;
inline constexpr std::uint64_t kind_error = 3;

inline std::uint64_t key(std::uint64_t id, std::uint64_t kind) {
  return id << 2 | kind;
}

inline int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

inline int pidfd_signal(int pidfd, int sig) {
  return static_cast<int>(
    ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

/// Where the runtime's warnings go (`process_runtime_options::on_warning`),
/// from any thread; a sink that throws is ignored.
class warning_sink {
public:
  explicit warning_sink(std::function<void(std::string_view)> sink)
    : sink_(std::move(sink)) {}

  void operator()(std::string_view message) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (sink_) {
      try {
        sink_(message);
      } catch (...) {
        // A failing warning sink must not take the reactor down.
      }
    }
  }

private:
  std::mutex mtx_;
  std::function<void(std::string_view)> sink_;
};

/// The attempt directory as the shim is told it (and as its command line
/// shows it): absolute, normalised, without a trailing slash.
std::string shim_dir_of(const std::string& dir);

/// A cgroup directory name from task id and attempt: no slashes, no dots
/// alone, bounded length.
std::string cgroup_name_for(const std::string& task_id, int attempt);

class process_handle;

struct attempt {
  std::uint64_t id = 0;
  std::string argv0;
  std::string attempt_dir;
  std::string artifacts_dir;
  attempt_callbacks cb;
  /// The handle start() returned, told when the attempt has been reported.
  std::weak_ptr<process_handle> handle;
  clock_type::time_point started;
  clock_type::time_point ended;

  /// The shim's pid (our child, or for an adopted attempt another node's)
  /// and the pidfd through which it is watched and signalled.
  pid_t pid = -1;
  int pidfd = -1;
  /// The agent's pid, as the shim reported it.
  pid_t agent_pid = -1;
  /// orphan_policy::kill: our end of the shim's stdin; closing it (or our
  /// death) makes the shim kill the agent. A served attempt: the serving
  /// shim's socket (watched for its `end`), whatever the policy.
  int control_fd = -1;
  /// Run by a serving shim (whose pid, pidfd and socket are `pid`, `pidfd`
  /// and `control_fd` until the attempt ends); `shim_ok` once the shim said
  /// `end` (it can serve the task's next attempt).
  bool served = false;
  bool shim_ok = false;
  /// What the serving shim has said after its report of the agent's start:
  /// its end and the exit record that comes with it.
  std::string end_bytes;
  /// start() did not wait for the serving shim's report of the agent's
  /// start: the reactor reads it (by `report_due`), then tells the handle
  /// and `cb.on_started` the agent's pid (`id_later`, until `announced`).
  /// Signals asked for before it came wait in `deferred_signal`, since the
  /// shim drops those that reach it before it reads its request.
  bool id_later = false;
  bool announced = false;
  bool report_pending = false;
  clock_type::time_point report_due;
  int deferred_signal = 0;
  /// The serving shim neither reported nor hung up in time: it was asked to
  /// end (SIGUSR1; SIGKILL at `kill_at`), and the attempt is reported as
  /// failed with `infrastructure_error` once its pidfd says it is gone and
  /// the agent its record names is killed. The reactor waits for none of it.
  bool ending_shim = false;
  /// Sent to a task's idle shim, which may have died since its last
  /// attempt: the request and the write ends of the output pipes, kept
  /// until the report came, to ask a fresh shim should that one hang up.
  std::string retry_request;
  int retry_out = -1;
  int retry_err = -1;

  /// The report came, or no fresh shim will be asked: the request and the
  /// pipes' write ends kept for one are let go.
  void forget_retry() {
    retry_request.clear();
    close_fd(retry_out);
    close_fd(retry_err);
  }
  std::string serve_dir;
  /// output.log, written by the shim.
  std::string log_path;
  /// Delivery of lines to `cb.on_line`; off while an adopted attempt's log
  /// is read up to where it was at adoption.
  bool delivering = true;
  /// How the agent ended, as the shim recorded it.
  std::optional<exit_record> record;

  /// An adopted attempt: its shim is not our child; its output is read from
  /// output.log as output.streams describes it.
  bool adopted = false;
  log_follower log;
  /// Read ends of the agent's stdout and stderr pipes.
  int output_fd = -1;
  int error_fd = -1;
  /// Set while the receiver of its lines is full: its pipes are not read.
  bool paused = false;
  std::optional<output_capture> capture;
  std::optional<detail::memory_cgroup> cgroup;

  /// Set when the attempt never ran: the outcome is known at start.
  bool spawn_failed = false;
  int preset_exit_code = 0;
  std::string failure_line;
  std::string infrastructure_error;

  /// The attempt did not run, or how it ran cannot be known: it is reported
  /// as exit 1 with `error`, ended now.
  void never_ran(std::string error) {
    spawn_failed = true;
    preset_exit_code = 1;
    infrastructure_error = std::move(error);
    ended = clock_type::now();
  }

  bool exited = false;
  int wait_status = 0;
  /// Set when, after the leader was reaped, a signal to the process group
  /// found no process in it (not even a zombie): none is left to reap or
  /// wait for, and none can join it.
  bool group_empty = false;
  bool eof = false;
  std::optional<clock_type::time_point> kill_at;
  std::optional<clock_type::time_point> drain_until;
  std::optional<clock_type::time_point> group_until;

  ~attempt() {
    forget_retry();
    close_fd(pidfd);
    close_fd(output_fd);
    close_fd(error_fd);
    close_fd(control_fd);
  }
};

using attempt_ptr = std::unique_ptr<attempt>;

} // namespace tasksup::runtime::detail

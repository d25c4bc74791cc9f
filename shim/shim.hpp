#pragma once

// The parts of tasksup-shim (shim_main.cpp says what it does): the options,
// one attempt's shim (shim.cpp) and the serving loop (shim_serve.cpp).

#include "process_spawn.hpp"
#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/output_capture.hpp"

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::agent_shim {

namespace rt = tasksup::runtime;
namespace dt = tasksup::runtime::detail;
using clock_type = std::chrono::steady_clock;

inline constexpr int exit_usage = 64;
inline constexpr int exit_failure = 70;

struct options {
  /// --serve: the directory the task's attempt directories are in.
  std::string serve_dir;
  std::string attempt_dir;
  std::uint64_t log_bytes = 100 * 1024 * 1024;
  std::chrono::milliseconds drain{2000};
  std::chrono::milliseconds group{5000};
  bool kill_orphan = false;
  std::string cgroup;
  int status_fd = 3;
  std::vector<char*> argv;
  // A served attempt's own (a per-attempt shim runs in the agent's
  // directory and environment, and forwards to fds 1 and 2).
  std::string cwd;
  std::vector<std::string> arg_strings;
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  int out_fd = 1;
  int err_fd = 2;
};

/// Says `text` on stderr and exits with `code`.
[[noreturn]] void die(const std::string& text, int code = exit_failure);

/// Writes all of `s` to `fd` (gives up on an error other than EINTR).
void write_all(int fd, std::string_view s);

/// One attempt: starts the agent, holds its pipes, writes its log and
/// records, forwards its output in order and says how it ended.
class shim {
public:
  /// `signals`: the signalfd (SIGCHLD, SIGTERM, SIGUSR1 ...); `control`:
  /// what hangs up when the runtime is gone, -1 for nothing; `serving`:
  /// the report goes to `control` (the socket) and stays open.
  shim(options o, int signals, int control, bool serving)
    : o_(std::move(o)), signal_fd_(signals), control_fd_(control),
      serving_(serving) {}

  int run();

  /// True once the runtime hung up (a serving shim then takes no more).
  bool runtime_gone() const { return runtime_gone_; }

  /// The exit record as written to exit.status (once `run` returned).
  const std::string& record_text() const { return record_text_; }

private:
  struct stream {
    int in = -1;  // the agent's pipe
    int out = -1; // ours to the runtime (1 or 2)
    rt::output_stream kind = rt::output_stream::out;
  };

  void open_log();
  /// The agent stream to read next, of those `poll` found ready.
  int next_to_read(bool ready_out, bool ready_err) const;
  void read_stream(int index);
  /// Forwards `pending_` (blocking until it is written when `block`).
  void flush_pending(bool block);
  /// Whether the runtime has read everything forwarded on the stream other
  /// than the pending one, so that the pending bytes cannot overtake it.
  bool other_drained() const;
  void drop_forwarding();
  /// Acts on every signal the signalfd holds.
  void on_signals();
  void on_signal(std::uint32_t signo);
  void reap();
  void signal_group(int sig);
  bool group_gone();
  void finish();
  /// Says the agent's pid (0: it did not start) to the runtime.
  void report(pid_t pid);
  /// How long the next poll may sleep (nullopt: until an event).
  /// `awaiting_reader`: the pending bytes wait for the runtime to read the
  /// other stream, which no event tells (see `reader_wait`). Decided once
  /// per turn with the descriptors polled: the runtime may read between two
  /// looks, and a turn that polled no pipe must not sleep for ever.
  std::optional<std::chrono::microseconds> poll_timeout(bool awaiting_reader);
  /// The next look for the runtime having read the other stream: 20 µs
  /// after the first, each wait twice the one before, at most a
  /// millisecond. The runtime usually reads within a few hundred
  /// microseconds (the first lines of every attempt wait so); a fixed
  /// millisecond added one to about one attempt in eight on a 2-CPU
  /// machine, and a receiver that stopped reading costs a look per
  /// millisecond, not more (BENCHMARKS.md §7).
  std::chrono::microseconds reader_wait();
  /// Sleeps in `poll` for `fds` at most `timeout` (nullopt: no limit).
  static int poll_for(pollfd* fds, std::size_t n,
                      std::optional<std::chrono::microseconds> timeout);
  /// True while output waits for the runtime to read it.
  bool blocked() const;

  options o_;
  std::optional<rt::output_capture> capture_;
  int index_fd_ = -1;
  std::string index_buf_;
  stream streams_[2];
  /// Read, logged, not yet forwarded (from `streams_[pending_stream_]`).
  std::string pending_;
  int pending_stream_ = 0;
  /// Fds 1 and 2 are one pipe (or file): nothing to keep in order.
  bool one_channel_ = false;
  /// The last wait for the runtime to read; zero once what waited was
  /// forwarded (flush_pending).
  std::chrono::microseconds reader_wait_{0};
  bool forwarding_ = true;
  int signal_fd_ = -1;
  int control_fd_ = -1;
  bool serving_ = false;
  bool runtime_gone_ = false;
  pid_t agent_ = -1;
  bool agent_running_ = false;
  bool group_empty_ = false;
  int wait_status_ = 0;
  clock_type::time_point started_;
  clock_type::time_point ended_;
  std::optional<clock_type::time_point> drain_until_;
  std::optional<clock_type::time_point> group_until_;
  dt::exit_record record_;
  std::string record_text_;
  std::vector<char> buf_ = std::vector<char>(64 * 1024);
};

/// Serves the attempts of one task, one after the other (--serve).
int serve(const options& base, int signal_fd);

} // namespace tasksup::agent_shim

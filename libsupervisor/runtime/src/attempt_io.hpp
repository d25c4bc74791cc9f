#pragma once

// The process runtime's I/O loop: the epoll set over the attempts' pidfds,
// shim sockets and output pipes, the wake-up eventfd, the deadlines, and
// the reading of each attempt's pipes (or, adopted, its log) into its
// output capture -- paused while the receiver of its lines is behind.
// Private to the runtime.

#include "attempt.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include <sys/epoll.h>

namespace tasksup::runtime::detail {

class attempt_io {
public:
  /// After an agent's exit its pipes are read for at most `drain_timeout`.
  attempt_io(std::chrono::milliseconds drain_timeout, warning_sink& warn)
    : drain_timeout_(drain_timeout), warn_(warn) {}
  attempt_io(const attempt_io&) = delete;
  attempt_io& operator=(const attempt_io&) = delete;
  ~attempt_io();

  /// Sets up the epoll set and the wake-up descriptor; returns why it
  /// could not (empty when it could).
  std::string open();

  // ---- the loop ----------------------------------------------------------

  /// Wakes the loop (any thread).
  void wake();

  /// Waits at most `timeout` ms (-1: no limit) for events; how many came
  /// (0 after an error, which is warned of). Reads the wake-up descriptor
  /// when it was one of them.
  int wait(std::vector<epoll_event>& events, int timeout);

  /// Watches the attempt's shim (its pidfd, or a served one's socket) and
  /// pipes; an errno when it cannot (then nothing of it is watched).
  int watch(attempt& a);

  /// Watches `fd` for the exit of what `id` names; false when it cannot.
  bool watch_exit(std::uint64_t id, int fd);

  void unwatch(int fd);

  /// Looks at attempt `id` again at `at`.
  void schedule(clock_type::time_point at, std::uint64_t id) {
    deadlines_.emplace(at, id);
  }

  /// The earliest deadline, if any.
  std::optional<clock_type::time_point> next_deadline() const {
    if (deadlines_.empty())
      return std::nullopt;
    return deadlines_.top().first;
  }

  /// The attempt of a deadline that is due at `now`, taken off the queue.
  std::optional<std::uint64_t> take_due(clock_type::time_point now);

  // ---- an attempt's output -------------------------------------------------

  /// Reads what one pipe holds (at most `max_read_per_turn`) into the
  /// capture; pauses the attempt once the capture is full. True when both
  /// pipes have now ended (`eof`).
  bool read_output(attempt& a, output_stream stream);

  /// After a serving shim's end: reads what the pipes hold (all the agent
  /// wrote is in them) and closes them. False when the receiver filled up
  /// first (the attempt is paused; resuming reads on).
  bool drain_after_end(attempt& a);

  /// Reads what output.streams says was appended to an adopted attempt's
  /// log into its capture; true when all of it was read, false when the
  /// log is behind or the receiver filled up (then the attempt is paused).
  bool follow_log(attempt& a);

  /// Reads what a serving shim said: true once it said the attempt's end
  /// (`shim_ok`, and `record` when the record it sent is sound) or hung up;
  /// false while more is to come.
  bool take_end(attempt& a);

  /// Stops reading the attempt's pipes while the receiver of its lines is
  /// full, and starts again (with a fresh drain after its exit) once not.
  void set_paused(attempt& a, bool paused);

  void close_stream(int& fd);

  /// Closes both pipes: the attempt's output has ended.
  void close_output(attempt& a);

private:
  using deadline = std::pair<clock_type::time_point, std::uint64_t>;

  std::chrono::milliseconds drain_timeout_;
  warning_sink& warn_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::priority_queue<deadline, std::vector<deadline>, std::greater<>>
    deadlines_;
  /// Reactor thread only.
  std::vector<char> read_buf_;
};

} // namespace tasksup::runtime::detail

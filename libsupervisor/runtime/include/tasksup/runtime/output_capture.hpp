#pragma once

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime {

/// Bounds that keep an attempt's output capture at a fixed memory size,
/// whatever the attempt prints.
struct output_capture_limits {
  /// Longest piece handed to `on_line`; a longer line arrives in pieces.
  std::size_t max_piece_bytes = 64 * 1024;
  /// Lines kept for classification (the newest ones): the outcome's tail.
  std::size_t tail_lines = outcome_tail_lines;
  /// Bytes kept of each tail line; the rest of the line is dropped.
  std::size_t tail_line_bytes = 4 * 1024;
  /// Bytes of one line handed to `on_line` (in pieces of `max_piece_bytes`);
  /// the rest of the line is counted, not delivered. 0: no limit.
  std::size_t line_bytes = 4 * 1024;
  /// Bytes handed to `on_line` over the whole attempt; lines past it are
  /// counted, not delivered (they still reach the log and the tail). 0: no
  /// limit.
  std::uint64_t attempt_bytes = 1024 * 1024;
  /// Size cap of the log file: output past it is counted, not written, and
  /// the log says so at the cut and at its end. 0: no cap.
  std::uint64_t log_bytes = 100 * 1024 * 1024;
};

/// Turns the raw stdout and stderr byte streams of one attempt into lines.
///
/// Every byte goes unchanged to the attempt's log file (up to `log_bytes`,
/// in the order the streams were fed); lines of each stream (split at `\n`,
/// with a `\r` before it removed, binary bytes kept as they are) go to
/// `on_line` with their stream, a line longer than `max_piece_bytes` in
/// several pieces, at most `line_bytes` of a line and `attempt_bytes` in
/// all; the newest `tail_lines` lines of both streams, each cut to
/// `tail_line_bytes` (a long line keeps its beginning), are kept for the
/// classifier whatever the delivery limits held back. Memory use is bounded
/// by the limits alone. Not thread-safe: one reader feeds it.
class output_capture {
public:
  /// Receives one line or piece of a long line, without its line ending;
  /// returns false when the receiver is full (see `full()`).
  using line_callback =
    std::function<bool(output_stream stream, std::string_view line)>;

  /// Creates a capture writing to `log_path` (created or truncated, mode
  /// 0600: the output may hold the task's secrets); an empty `log_path` keeps
  /// no log. Fails when the file cannot be opened, naming the file and the
  /// reason.
  static expected<output_capture> create(std::string log_path,
                                         line_callback on_line,
                                         output_capture_limits limits = {});

  output_capture(output_capture&& other) noexcept;

  output_capture& operator=(output_capture&& other) noexcept;

  output_capture(const output_capture&) = delete;

  output_capture& operator=(const output_capture&) = delete;

  /// Closes the log file (without flushing a pending partial line).
  ~output_capture();

  /// Consumes the next bytes of `stream`.
  void feed(output_stream stream, std::string_view bytes);

  /// Consumes the next bytes of stdout.
  void feed(std::string_view bytes) { feed(output_stream::out, bytes); }

  /// Ends the streams: delivers last unterminated lines, notes in the log
  /// what its cap held back, and closes it. Further `feed` calls are ignored.
  void finish();

  /// True once `on_line` returned false: the reader should stop feeding
  /// until the receiver has caught up, then call `resume()`.
  bool full() const noexcept { return full_; }

  /// The receiver caught up.
  void resume() noexcept { full_ = false; }

  /// Bytes of output (line endings excluded) the delivery limits kept from
  /// `on_line`.
  std::uint64_t bytes_held_back() const noexcept { return held_bytes_; }

  /// Lines of which some or all bytes were kept from `on_line`.
  std::uint64_t lines_held_back() const noexcept { return held_lines_; }

  /// Bytes the log's cap kept out of the log file.
  std::uint64_t bytes_not_logged() const noexcept { return unlogged_bytes_; }

  /// One sentence saying what the limits held back from `on_line` and the
  /// log, empty when nothing was.
  std::string summary() const;

  /// The kept tail, oldest line first.
  std::vector<std::string> tail() const;

  /// The log file's path, empty when no log is kept.
  const std::string& log_path() const noexcept { return log_path_; }

  /// The first error writing the log (then logging stopped), empty if none.
  const std::string& log_error() const noexcept { return log_error_; }

  /// Total bytes consumed so far.
  std::size_t bytes_seen() const noexcept { return bytes_seen_; }

  /// What went into the log file: `kind` is 'o' (stdout), 'e' (stderr) or
  /// 'n' (a note of tasksup's own, e.g. at the log's cap), `bytes` how many
  /// bytes of that kind were just appended. Lets a writer keep an index of
  /// which stream each byte of the log came from.
  using log_observer = std::function<void(char kind, std::size_t bytes)>;

  /// Sets the observer of log writes (empty: none).
  void set_log_observer(log_observer observer) {
    observer_ = std::move(observer);
  }

  /// Counts `bytes` that another writer of the same log (the process
  /// runtime's shim) kept out of it, for `summary()`.
  void add_not_logged(std::uint64_t bytes) noexcept {
    unlogged_bytes_ += bytes;
  }

  /// The next `bytes` fed are in the log already (an adopting runtime reads
  /// the attempt's output again from its start): they count towards the
  /// log's cap but are not written.
  void skip_logging(std::uint64_t bytes) noexcept { skip_log_ = bytes; }

  /// Opens `log_path` for appending instead of truncating it (a runtime
  /// that adopts an attempt another process started); created 0600.
  static expected<output_capture> append_to(std::string log_path,
                                            line_callback on_line,
                                            output_capture_limits limits = {});

private:
  /// The line being read on one stream.
  struct line_state {
    /// The line's bytes not yet delivered; at most `max_piece_bytes`.
    std::string pending;
    /// True while the line has already delivered a piece.
    bool continued = false;
    /// Bytes of the line passed to `deliver` so far.
    std::size_t offset = 0;
    /// True once bytes of the line were held back (counted once per line).
    bool held = false;
  };

  output_capture(std::string log_path, int fd, line_callback on_line,
                 output_capture_limits limits);

  void write_log(output_stream s, std::string_view bytes);

  void write_log_raw(std::string_view bytes, char kind);

  void append_partial(output_stream s, line_state& l, std::string_view bytes);

  void end_line(output_stream s, line_state& l);

  void deliver(output_stream s, line_state& l, std::string_view piece,
               bool first_piece);

  void hold(line_state& l, std::size_t n);

  void close_log() noexcept;

  std::string log_path_;
  int fd_ = -1;
  line_callback on_line_;
  log_observer observer_;
  output_capture_limits limits_;
  line_state lines_[2];
  bool finished_ = false;
  bool full_ = false;
  std::deque<std::string> tail_;
  std::string log_error_;
  std::size_t bytes_seen_ = 0;
  std::uint64_t logged_bytes_ = 0;
  std::uint64_t skip_log_ = 0;
  std::uint64_t unlogged_bytes_ = 0;
  std::uint64_t delivered_bytes_ = 0;
  std::uint64_t held_bytes_ = 0;
  std::uint64_t held_lines_ = 0;
};

} // namespace tasksup::runtime

#pragma once

#include "tasksup/supervisor/expected.hpp"

#include <cstddef>
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
  /// Lines kept for classification (the newest ones).
  std::size_t tail_lines = 256;
  /// Bytes kept of each tail line; the rest of the line is dropped.
  std::size_t tail_line_bytes = 4 * 1024;
};

/// Turns the raw combined stdout/stderr byte stream of one attempt into lines.
///
/// Every byte goes unchanged to the attempt's log file; lines (split at `\n`,
/// with a `\r` before it removed, binary bytes kept as they are) go to
/// `on_line`, a line longer than `max_piece_bytes` in several pieces; the
/// newest `tail_lines` lines, each cut to `tail_line_bytes` (a long line keeps
/// its beginning), are kept for the classifier. Memory use is bounded by the
/// limits alone. Not thread-safe: one reader feeds it.
class output_capture {
public:
  /// Receives one line or piece of a long line, without its line ending.
  using line_callback = std::function<void(std::string_view line)>;

  /// Creates a capture writing to `log_path` (created or truncated, mode
  /// 0644); an empty `log_path` keeps no log. Fails when the file cannot be
  /// opened, naming the file and the reason.
  static expected<output_capture> create(std::string log_path,
                                         line_callback on_line,
                                         output_capture_limits limits = {});

  output_capture(output_capture&& other) noexcept;

  output_capture& operator=(output_capture&& other) noexcept;

  output_capture(const output_capture&) = delete;

  output_capture& operator=(const output_capture&) = delete;

  /// Closes the log file (without flushing a pending partial line).
  ~output_capture();

  /// Consumes the next bytes of the stream.
  void feed(std::string_view bytes);

  /// Ends the stream: delivers a last unterminated line and closes the log.
  /// Further `feed` calls are ignored.
  void finish();

  /// The kept tail, oldest line first.
  std::vector<std::string> tail() const;

  /// The log file's path, empty when no log is kept.
  const std::string& log_path() const noexcept { return log_path_; }

  /// The first error writing the log (then logging stopped), empty if none.
  const std::string& log_error() const noexcept { return log_error_; }

  /// Total bytes consumed so far.
  std::size_t bytes_seen() const noexcept { return bytes_seen_; }

private:
  output_capture(std::string log_path, int fd, line_callback on_line,
                 output_capture_limits limits);

  void write_log(std::string_view bytes);

  void append_partial(std::string_view bytes);

  void end_line();

  void deliver(std::string_view piece, bool first_piece);

  void close_log() noexcept;

  std::string log_path_;
  int fd_ = -1;
  line_callback on_line_;
  output_capture_limits limits_;
  /// The current line's bytes not yet delivered; at most `max_piece_bytes`.
  std::string pending_;
  /// True while the current line has already delivered a piece.
  bool continued_ = false;
  bool finished_ = false;
  std::deque<std::string> tail_;
  std::string log_error_;
  std::size_t bytes_seen_ = 0;
};

} // namespace tasksup::runtime

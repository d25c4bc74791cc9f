#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

/// The last lines of a stream of untrusted output, in bounded memory: at most
/// `max_lines` lines of at most `max_line_bytes` bytes each (longer lines keep
/// their first `max_line_bytes` bytes). Feeding runs in time linear in the
/// input and, once the ring is warm, allocates nothing per line, so huge or
/// binary input is fine. Lines end at '\n'; a trailing '\r' is dropped.
class log_tail {
public:
  log_tail(std::size_t max_lines, std::size_t max_line_bytes);

  /// Appends a chunk of the stream (lines may span chunks).
  void feed(std::string_view chunk);

  /// Ends the stream: an unterminated last line counts as a line.
  void finish();

  /// The kept lines, oldest first.
  std::vector<std::string> lines() const;

  /// Lines seen in total, kept or not.
  std::uint64_t total_lines() const noexcept { return total_lines_; }

  /// Lines that were cut to `max_line_bytes`.
  std::uint64_t truncated_lines() const noexcept { return truncated_lines_; }

private:
  void end_line();

  std::size_t max_lines_;
  std::size_t max_line_bytes_;
  std::vector<std::string> ring_;
  /// Index of the slot the next finished line goes to.
  std::size_t next_ = 0;
  std::size_t size_ = 0;
  std::string current_;
  bool current_started_ = false;
  bool current_truncated_ = false;
  std::uint64_t total_lines_ = 0;
  std::uint64_t truncated_lines_ = 0;
};

/// Reads `file` to its end into `tail` (then calls `finish`). Returns an
/// empty string on success, else the error text (from errno).
std::string read_into(std::FILE* file, log_tail& tail);

} // namespace tasksup::app

#include "tasksup/runtime/output_capture.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace tasksup::runtime {

expected<output_capture> output_capture::create(std::string log_path,
                                                line_callback on_line,
                                                output_capture_limits limits) {
  if (limits.max_piece_bytes == 0)
    return error{"output capture", "max_piece_bytes", "must be at least 1"};
  int fd = -1;
  if (!log_path.empty()) {
    fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                private_file_mode);
    if (fd < 0)
      return error{log_path, "",
                   std::string{"cannot open output log: "} +
                     std::strerror(errno)};
  }
  return output_capture{std::move(log_path), fd, std::move(on_line), limits};
}

expected<output_capture>
output_capture::append_to(std::string log_path, line_callback on_line,
                          output_capture_limits limits) {
  if (limits.max_piece_bytes == 0)
    return error{"output capture", "max_piece_bytes", "must be at least 1"};
  int fd = -1;
  if (!log_path.empty()) {
    fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                private_file_mode);
    if (fd < 0)
      return error{log_path, "",
                   std::string{"cannot open output log: "} +
                     std::strerror(errno)};
  }
  return output_capture{std::move(log_path), fd, std::move(on_line), limits};
}

output_capture::output_capture(std::string log_path, int fd,
                               line_callback on_line,
                               output_capture_limits limits)
  : log_path_(std::move(log_path)), fd_(fd), on_line_(std::move(on_line)),
    limits_(limits) {
  for (auto& l : lines_)
    l.pending.reserve(std::min<std::size_t>(limits_.max_piece_bytes, 4096));
}

output_capture::output_capture(output_capture&& other) noexcept
  : log_path_(std::move(other.log_path_)), fd_(std::exchange(other.fd_, -1)),
    on_line_(std::move(other.on_line_)), observer_(std::move(other.observer_)),
    limits_(other.limits_), lines_{std::move(other.lines_[0]),
                                   std::move(other.lines_[1])},
    finished_(other.finished_), full_(other.full_),
    tail_(std::move(other.tail_)), log_error_(std::move(other.log_error_)),
    bytes_seen_(other.bytes_seen_), logged_bytes_(other.logged_bytes_),
    skip_log_(other.skip_log_), unlogged_bytes_(other.unlogged_bytes_),
    delivered_bytes_(other.delivered_bytes_), held_bytes_(other.held_bytes_),
    held_lines_(other.held_lines_) {}

output_capture& output_capture::operator=(output_capture&& other) noexcept {
  if (this != &other) {
    close_log();
    log_path_ = std::move(other.log_path_);
    fd_ = std::exchange(other.fd_, -1);
    on_line_ = std::move(other.on_line_);
    observer_ = std::move(other.observer_);
    limits_ = other.limits_;
    lines_[0] = std::move(other.lines_[0]);
    lines_[1] = std::move(other.lines_[1]);
    finished_ = other.finished_;
    full_ = other.full_;
    tail_ = std::move(other.tail_);
    log_error_ = std::move(other.log_error_);
    bytes_seen_ = other.bytes_seen_;
    logged_bytes_ = other.logged_bytes_;
    skip_log_ = other.skip_log_;
    unlogged_bytes_ = other.unlogged_bytes_;
    delivered_bytes_ = other.delivered_bytes_;
    held_bytes_ = other.held_bytes_;
    held_lines_ = other.held_lines_;
  }
  return *this;
}

output_capture::~output_capture() {
  close_log();
}

void output_capture::feed(output_stream stream, std::string_view bytes) {
  if (finished_ || bytes.empty())
    return;
  bytes_seen_ += bytes.size();
  write_log(stream, bytes);
  // A writer that only logs (the shim) needs no lines.
  if (!on_line_ && limits_.tail_lines == 0)
    return;
  auto& l = lines_[stream == output_stream::err ? 1 : 0];
  while (!bytes.empty()) {
    auto* nl =
      static_cast<const char*>(std::memchr(bytes.data(), '\n', bytes.size()));
    if (nl == nullptr) {
      append_partial(stream, l, bytes);
      return;
    }
    auto len = static_cast<std::size_t>(nl - bytes.data());
    append_partial(stream, l, bytes.substr(0, len));
    end_line(stream, l);
    bytes.remove_prefix(len + 1);
  }
}

void output_capture::finish() {
  if (finished_)
    return;
  finished_ = true;
  for (auto s : {output_stream::out, output_stream::err}) {
    auto& l = lines_[s == output_stream::err ? 1 : 0];
    if (!l.pending.empty())
      deliver(s, l, l.pending, !l.continued);
    l = line_state{};
  }
  if (unlogged_bytes_ > 0)
    write_log_raw("[tasksup: " + std::to_string(unlogged_bytes_) +
                    " more bytes of output were not logged]\n",
                  'n');
  close_log();
}

std::vector<std::string> output_capture::tail() const {
  return {tail_.begin(), tail_.end()};
}

std::string output_capture::summary() const {
  std::string text;
  if (held_bytes_ > 0) {
    text = std::to_string(held_bytes_) + " bytes of output in " +
           std::to_string(held_lines_) + " lines were not shown (limits: " +
           std::to_string(limits_.line_bytes) + " bytes per line, " +
           std::to_string(limits_.attempt_bytes) + " bytes per attempt)";
  }
  if (unlogged_bytes_ > 0) {
    text += text.empty() ? "" : "; ";
    text += std::to_string(unlogged_bytes_) +
            " bytes were not logged (the log's cap is " +
            std::to_string(limits_.log_bytes) + " bytes)";
  }
  return text;
}

void output_capture::write_log(output_stream s, std::string_view bytes) {
  char kind = s == output_stream::err ? 'e' : 'o';
  if (skip_log_ > 0) {
    auto n = std::min<std::uint64_t>(skip_log_, bytes.size());
    skip_log_ -= n;
    logged_bytes_ += n;
    bytes.remove_prefix(static_cast<std::size_t>(n));
    if (bytes.empty())
      return;
  }
  if (fd_ < 0)
    return;
  if (limits_.log_bytes > 0) {
    // `logged_bytes_` past the cap marks a log already cut.
    if (logged_bytes_ > limits_.log_bytes) {
      unlogged_bytes_ += bytes.size();
      return;
    }
    if (logged_bytes_ + bytes.size() > limits_.log_bytes) {
      auto room = limits_.log_bytes - logged_bytes_;
      auto head = bytes.substr(0, static_cast<std::size_t>(room));
      unlogged_bytes_ += bytes.size() - head.size();
      logged_bytes_ = limits_.log_bytes + 1;
      write_log_raw(head, kind);
      write_log_raw("\n[tasksup: output.log reached its cap of " +
                      std::to_string(limits_.log_bytes) +
                      " bytes; further output is counted, not logged]\n",
                    'n');
      return;
    }
  }
  logged_bytes_ += bytes.size();
  write_log_raw(bytes, kind);
}

void output_capture::write_log_raw(std::string_view bytes, char kind) {
  if (fd_ < 0 || bytes.empty())
    return;
  auto size = bytes.size();
  while (!bytes.empty()) {
    auto n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      // A full disk must not take the attempt down: stop logging, remember
      // why, keep delivering lines.
      log_error_ = log_path_ + ": write failed: " + std::strerror(errno);
      close_log();
      return;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  if (observer_)
    observer_(kind, size);
}

void output_capture::append_partial(output_stream s, line_state& l,
                                    std::string_view bytes) {
  // Flush lazily: a full buffer is delivered only once more bytes of the same
  // line arrive, so a line of exactly `max_piece_bytes` stays one line.
  while (!bytes.empty()) {
    if (l.pending.size() >= limits_.max_piece_bytes) {
      deliver(s, l, l.pending, !l.continued);
      l.continued = true;
      l.pending.clear();
    }
    // Once `on_line` has had all it may see of this line (and the tail its
    // first piece), the rest of the line is only counted.
    if (l.continued && l.pending.empty() && limits_.line_bytes > 0 &&
        l.offset >= limits_.line_bytes) {
      hold(l, bytes.size());
      return;
    }
    auto room = limits_.max_piece_bytes - l.pending.size();
    auto take = std::min(room, bytes.size());
    l.pending.append(bytes.data(), take);
    bytes.remove_prefix(take);
  }
}

void output_capture::end_line(output_stream s, line_state& l) {
  if (!l.pending.empty() && l.pending.back() == '\r')
    l.pending.pop_back();
  // A `\r\n` right after a full piece leaves nothing: the line is complete.
  if (!(l.pending.empty() && l.continued))
    deliver(s, l, l.pending, !l.continued);
  l.pending.clear();
  l.continued = false;
  l.offset = 0;
  l.held = false;
}

void output_capture::hold(line_state& l, std::size_t n) {
  held_bytes_ += n;
  if (!l.held) {
    l.held = true;
    ++held_lines_;
  }
}

void output_capture::deliver(output_stream s, line_state& l,
                             std::string_view piece, bool first_piece) {
  if (first_piece && limits_.tail_lines > 0) {
    if (tail_.size() >= limits_.tail_lines)
      tail_.pop_front();
    tail_.emplace_back(piece.substr(0, limits_.tail_line_bytes));
  }
  // The part of this piece within the line's and the attempt's limits.
  std::uint64_t allowed = piece.size();
  if (limits_.line_bytes > 0)
    allowed =
      l.offset >= limits_.line_bytes
        ? 0
        : std::min<std::uint64_t>(allowed, limits_.line_bytes - l.offset);
  if (limits_.attempt_bytes > 0)
    allowed = delivered_bytes_ >= limits_.attempt_bytes
                ? 0
                : std::min(allowed, limits_.attempt_bytes - delivered_bytes_);
  l.offset += piece.size();
  auto n = static_cast<std::size_t>(allowed);
  if (n < piece.size())
    hold(l, piece.size() - n);
  // An empty line is delivered as such while the attempt's limit allows;
  // a piece cut to nothing is not delivered at all.
  bool attempt_full =
    limits_.attempt_bytes > 0 && delivered_bytes_ >= limits_.attempt_bytes;
  if (n == 0 && piece.empty() && attempt_full)
    hold(l, 0);
  if (n == 0 && (!piece.empty() || attempt_full))
    return;
  delivered_bytes_ += n;
  // The last answer counts: a receiver that said "full" and then took a
  // later line has already been told to resume by its own accounting.
  if (on_line_)
    full_ = !on_line_(s, piece.substr(0, n));
}

void output_capture::close_log() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

} // namespace tasksup::runtime

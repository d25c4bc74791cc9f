#include "tasksup/runtime/output_capture.hpp"

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
    fd =
      ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
  pending_.reserve(std::min<std::size_t>(limits_.max_piece_bytes, 4096));
}

output_capture::output_capture(output_capture&& other) noexcept
  : log_path_(std::move(other.log_path_)), fd_(std::exchange(other.fd_, -1)),
    on_line_(std::move(other.on_line_)), limits_(other.limits_),
    pending_(std::move(other.pending_)), continued_(other.continued_),
    finished_(other.finished_), tail_(std::move(other.tail_)),
    log_error_(std::move(other.log_error_)), bytes_seen_(other.bytes_seen_) {}

output_capture& output_capture::operator=(output_capture&& other) noexcept {
  if (this != &other) {
    close_log();
    log_path_ = std::move(other.log_path_);
    fd_ = std::exchange(other.fd_, -1);
    on_line_ = std::move(other.on_line_);
    limits_ = other.limits_;
    pending_ = std::move(other.pending_);
    continued_ = other.continued_;
    finished_ = other.finished_;
    tail_ = std::move(other.tail_);
    log_error_ = std::move(other.log_error_);
    bytes_seen_ = other.bytes_seen_;
  }
  return *this;
}

output_capture::~output_capture() {
  close_log();
}

void output_capture::feed(std::string_view bytes) {
  if (finished_ || bytes.empty())
    return;
  bytes_seen_ += bytes.size();
  write_log(bytes);
  while (!bytes.empty()) {
    auto* nl =
      static_cast<const char*>(std::memchr(bytes.data(), '\n', bytes.size()));
    if (nl == nullptr) {
      append_partial(bytes);
      return;
    }
    auto len = static_cast<std::size_t>(nl - bytes.data());
    append_partial(bytes.substr(0, len));
    end_line();
    bytes.remove_prefix(len + 1);
  }
}

void output_capture::finish() {
  if (finished_)
    return;
  finished_ = true;
  if (!pending_.empty()) {
    deliver(pending_, !continued_);
    pending_.clear();
  }
  continued_ = false;
  close_log();
}

std::vector<std::string> output_capture::tail() const {
  return {tail_.begin(), tail_.end()};
}

void output_capture::write_log(std::string_view bytes) {
  if (fd_ < 0)
    return;
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
}

void output_capture::append_partial(std::string_view bytes) {
  // Flush lazily: a full buffer is delivered only once more bytes of the same
  // line arrive, so a line of exactly `max_piece_bytes` stays one line.
  while (!bytes.empty()) {
    if (pending_.size() >= limits_.max_piece_bytes) {
      deliver(pending_, !continued_);
      continued_ = true;
      pending_.clear();
    }
    auto room = limits_.max_piece_bytes - pending_.size();
    auto take = std::min(room, bytes.size());
    pending_.append(bytes.data(), take);
    bytes.remove_prefix(take);
  }
}

void output_capture::end_line() {
  if (!pending_.empty() && pending_.back() == '\r')
    pending_.pop_back();
  // A `\r\n` right after a full piece leaves nothing: the line is complete.
  if (!(pending_.empty() && continued_))
    deliver(pending_, !continued_);
  pending_.clear();
  continued_ = false;
}

void output_capture::deliver(std::string_view piece, bool first_piece) {
  if (first_piece && limits_.tail_lines > 0) {
    if (tail_.size() >= limits_.tail_lines)
      tail_.pop_front();
    tail_.emplace_back(piece.substr(0, limits_.tail_line_bytes));
  }
  if (on_line_)
    on_line_(piece);
}

void output_capture::close_log() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

} // namespace tasksup::runtime

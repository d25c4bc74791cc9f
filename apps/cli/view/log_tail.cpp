#include "log_tail.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace tasksup::app {

log_tail::log_tail(std::size_t max_lines, std::size_t max_line_bytes)
  : max_lines_(std::max<std::size_t>(max_lines, 1)),
    max_line_bytes_(max_line_bytes) {
  ring_.resize(max_lines_);
  current_.reserve(max_line_bytes_);
}

void log_tail::feed(std::string_view chunk) {
  while (!chunk.empty()) {
    auto newline = chunk.find('\n');
    auto piece = chunk.substr(0, newline);
    current_started_ = true;
    auto room = max_line_bytes_ - current_.size();
    if (piece.size() > room) {
      current_.append(piece.substr(0, room));
      current_truncated_ = true;
    } else {
      current_.append(piece);
    }
    if (newline == std::string_view::npos)
      return;
    end_line();
    chunk.remove_prefix(newline + 1);
  }
}

void log_tail::finish() {
  if (current_started_)
    end_line();
}

void log_tail::end_line() {
  // A '\r' cut off by truncation is gone already; only strip a kept one.
  if (!current_truncated_ && !current_.empty() && current_.back() == '\r')
    current_.pop_back();
  // Swap into the ring so the slot's old buffer is reused for the next line.
  std::swap(ring_[next_], current_);
  current_.clear();
  next_ = (next_ + 1) % max_lines_;
  size_ = std::min(size_ + 1, max_lines_);
  ++total_lines_;
  if (current_truncated_)
    ++truncated_lines_;
  current_started_ = false;
  current_truncated_ = false;
}

std::vector<std::string> log_tail::lines() const {
  std::vector<std::string> out;
  out.reserve(size_);
  auto first = (next_ + max_lines_ - size_) % max_lines_;
  for (std::size_t i = 0; i < size_; ++i)
    out.push_back(ring_[(first + i) % max_lines_]);
  return out;
}

std::string read_into(std::FILE* file, log_tail& tail) {
  std::vector<char> buf(64 * 1024);
  for (;;) {
    auto n = std::fread(buf.data(), 1, buf.size(), file);
    if (n > 0)
      tail.feed(std::string_view{buf.data(), n});
    if (n < buf.size()) {
      if (std::ferror(file))
        return std::strerror(errno);
      break;
    }
  }
  tail.finish();
  return {};
}

} // namespace tasksup::app

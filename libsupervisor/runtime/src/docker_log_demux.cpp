#include "tasksup/runtime/detail/docker_log_demux.hpp"

#include <algorithm>
#include <utility>

namespace tasksup::runtime::detail {

docker_log_demux::docker_log_demux(payload_callback on_payload)
  : on_payload_(std::move(on_payload)) {}

bool docker_log_demux::feed(std::string_view bytes) {
  if (!error_.empty())
    return false;
  while (!bytes.empty()) {
    if (payload_left_ > 0) {
      auto n = std::min<std::size_t>(payload_left_, bytes.size());
      on_payload_(stream_, bytes.substr(0, n));
      payload_left_ -= static_cast<std::uint32_t>(n);
      bytes.remove_prefix(n);
      continue;
    }
    auto n = std::min(header_.size() - header_fill_, bytes.size());
    std::copy_n(bytes.begin(), n, header_.begin() + header_fill_);
    header_fill_ += n;
    bytes.remove_prefix(n);
    if (header_fill_ < header_.size())
      return true;
    header_fill_ = 0;
    if (header_[0] > 2 || header_[1] != 0 || header_[2] != 0 ||
        header_[3] != 0) {
      error_ = "malformed log stream from the Docker engine: bad frame header "
               "(was the container created with a TTY?)";
      return false;
    }
    stream_ = header_[0];
    payload_left_ = (std::uint32_t{header_[4]} << 24) |
                    (std::uint32_t{header_[5]} << 16) |
                    (std::uint32_t{header_[6]} << 8) | header_[7];
  }
  return true;
}

bool docker_log_demux::at_frame_boundary() const noexcept {
  return error_.empty() && header_fill_ == 0 && payload_left_ == 0;
}

} // namespace tasksup::runtime::detail

#include "basp_frames.hpp"

#include <algorithm>

namespace tasksup::app {

bool frame_reader::consume(const unsigned char* data, std::size_t n,
                           std::uint32_t max) {
  std::size_t i = 0;
  while (i < n) {
    if (payload_left > 0) {
      auto k = std::min<std::uint64_t>(payload_left, n - i);
      if (capturing())
        handshake.append(reinterpret_cast<const char*>(data + i),
                         static_cast<std::size_t>(k));
      payload_left -= k;
      i += static_cast<std::size_t>(k);
      if (payload_left == 0 && capturing())
        handshake_complete = true;
      continue;
    }
    auto k = std::min(basp_header_size - header_have, n - i);
    for (std::size_t j = 0; j < k; ++j) {
      auto pos = header_have + j;
      if (pos == 0)
        operation = data[i + j];
      if (pos >= basp_length_offset && pos < basp_length_offset + 4)
        length = (length << 8) | data[i + j];
    }
    header_have += k;
    i += k;
    if (header_have == basp_header_size) {
      if (length > max)
        return false;
      ++frames;
      if (frames == 1 && operation == basp_client_handshake &&
          length > max_handshake_capture)
        operation = 0; // not kept
      payload_left = length;
      header_have = 0;
      length = 0;
      if (payload_left == 0 && capturing())
        handshake_complete = true;
    }
  }
  return true;
}

} // namespace tasksup::app

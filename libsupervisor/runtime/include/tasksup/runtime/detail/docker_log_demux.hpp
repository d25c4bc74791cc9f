#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tasksup::runtime::detail {

/// Splits the Docker Engine's multiplexed log stream (containers created with
/// `Tty: false`) back into payload bytes.
///
/// Each frame is an 8-byte header — stream type (0 stdin, 1 stdout, 2 stderr),
/// three zero bytes, a big-endian 32-bit payload size — followed by the
/// payload. Payloads are passed on as they arrive, never buffered, so memory
/// stays constant whatever the frame sizes; frames may be split anywhere
/// across `feed` calls. A header that breaks the format makes the demuxer
/// fail for good (the stream is untrusted).
class docker_log_demux {
public:
  /// Receives payload bytes and the stream they came from (1 or 2; 0 for
  /// stdin echo).
  using payload_callback =
    std::function<void(int stream, std::string_view bytes)>;

  /// Creates a demuxer passing payloads to `on_payload`.
  explicit docker_log_demux(payload_callback on_payload);

  /// Consumes the next bytes; returns false once the stream is malformed
  /// (then `error()` says why and further input is ignored).
  bool feed(std::string_view bytes);

  /// True when the stream ended between frames (not inside a header or a
  /// payload).
  bool at_frame_boundary() const noexcept;

  /// Why the stream was rejected, empty while it is well-formed.
  const std::string& error() const noexcept { return error_; }

private:
  payload_callback on_payload_;
  std::array<unsigned char, 8> header_{};
  std::size_t header_fill_ = 0;
  std::uint32_t payload_left_ = 0;
  int stream_ = 0;
  std::string error_;
};

} // namespace tasksup::runtime::detail

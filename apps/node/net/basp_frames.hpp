#pragma once

// The BASP framing of the bytes a client sends to the node's front door, as
// the connection guard reads it to bound each frame's size before CAF sees
// it and to keep the client's handshake (which names its node id). CAF
// 0.17's wire format.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tasksup::app {

/// Size of a BASP header in CAF 0.17: operation, two padding bytes, flags,
/// payload length (u32, network order), operation data (u64), source and
/// destination actor (u64 each).
constexpr std::size_t basp_header_size = 32;

/// Offset of the payload length within the header.
constexpr std::size_t basp_length_offset = 4;

/// The BASP operation of a client handshake (CAF 0.17: the first frame a
/// client sends; its payload starts with the client's node id).
constexpr unsigned char basp_client_handshake = 0x01;

/// At most this much of the client handshake's payload is kept (a node id
/// takes a few dozen bytes).
constexpr std::size_t max_handshake_capture = 4096;

/// Tracks the BASP framing of the bytes a peer sends, and keeps the
/// payload of its first frame when that is a client handshake.
struct frame_reader {
  std::size_t header_have = 0;
  std::uint32_t length = 0;
  std::uint64_t payload_left = 0;
  /// The operation of the frame being read, and how many frames began.
  unsigned char operation = 0;
  std::size_t frames = 0;
  /// The first frame's payload, once complete, if it was a client
  /// handshake no larger than `max_handshake_capture`.
  std::string handshake;
  bool handshake_complete = false;

  bool capturing() const noexcept {
    return frames == 1 && operation == basp_client_handshake &&
           !handshake_complete;
  }

  bool mid_frame() const noexcept {
    return header_have > 0 || payload_left > 0;
  }

  /// Consumes `n` bytes; false when a header announces more than `max`.
  bool consume(const unsigned char* data, std::size_t n, std::uint32_t max);
};

} // namespace tasksup::app

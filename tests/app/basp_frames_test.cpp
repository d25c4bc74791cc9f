// The front door's frame reader: it refuses a frame whose header announces
// more than the limit before any of it is buffered, follows frames split
// across reads at any byte, and keeps a client handshake's payload (which
// names the client's node id) but not a larger one or another operation's.

#include "basp_frames.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace tasksup::app;

namespace {

/// One frame as CAF 0.17 writes it: a 32-byte header (operation first, the
/// payload length big-endian at offset 4), then the payload.
std::vector<unsigned char> frame(unsigned char operation,
                                 const std::string& payload) {
  std::vector<unsigned char> out(basp_header_size + payload.size(), 0);
  out[0] = operation;
  auto n = static_cast<std::uint32_t>(payload.size());
  out[basp_length_offset] = static_cast<unsigned char>(n >> 24);
  out[basp_length_offset + 1] = static_cast<unsigned char>(n >> 16);
  out[basp_length_offset + 2] = static_cast<unsigned char>(n >> 8);
  out[basp_length_offset + 3] = static_cast<unsigned char>(n);
  std::copy(payload.begin(), payload.end(), out.begin() + basp_header_size);
  return out;
}

/// Feeds `bytes` to `r` in pieces of `step` bytes; false when refused.
bool feed(frame_reader& r, const std::vector<unsigned char>& bytes,
          std::size_t step, std::uint32_t max) {
  for (std::size_t i = 0; i < bytes.size(); i += step) {
    auto n = std::min(step, bytes.size() - i);
    if (!r.consume(bytes.data() + i, n, max))
      return false;
  }
  return true;
}

} // namespace

TEST_CASE("a client handshake's payload is kept, however the reads split it") {
  auto bytes = frame(basp_client_handshake, "node-id-bytes");
  auto second = frame(0x03, "a later message");
  bytes.insert(bytes.end(), second.begin(), second.end());
  for (std::size_t step : {1u, 3u, 31u, 32u, 33u, 1000u}) {
    frame_reader r;
    REQUIRE(feed(r, bytes, step, 1024));
    CHECK(r.frames == 2);
    CHECK(r.handshake_complete);
    CHECK(r.handshake == "node-id-bytes");
    CHECK_FALSE(r.mid_frame());
  }
}

TEST_CASE("a frame announcing more than the limit is refused at its header") {
  frame_reader r;
  auto big = frame(0x03, std::string(100, 'x'));
  // Only the header: the refusal comes before any payload arrives.
  std::vector<unsigned char> header(big.begin(),
                                    big.begin() + basp_header_size);
  CHECK_FALSE(r.consume(header.data(), header.size(), 99));
  frame_reader exact;
  CHECK(feed(exact, big, 7, 100));
}

TEST_CASE("neither a large handshake nor another first frame is kept") {
  frame_reader large;
  REQUIRE(feed(
    large,
    frame(basp_client_handshake, std::string(max_handshake_capture + 1, 'n')),
    512, 1 << 20));
  CHECK(large.handshake.empty());
  CHECK_FALSE(large.handshake_complete);

  frame_reader other;
  REQUIRE(feed(other, frame(0x03, "not a handshake"), 5, 1024));
  CHECK(other.handshake.empty());
  CHECK(other.frames == 1);

  frame_reader half;
  auto bytes = frame(basp_client_handshake, "partial");
  bytes.resize(bytes.size() - 2);
  REQUIRE(feed(half, bytes, 4, 1024));
  CHECK(half.mid_frame());
  CHECK_FALSE(half.handshake_complete);
}

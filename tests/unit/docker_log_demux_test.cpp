#include "tasksup/runtime/detail/docker_log_demux.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

using tasksup::runtime::detail::docker_log_demux;

std::string frame(int stream, const std::string& payload) {
  std::string out(8, '\0');
  out[0] = static_cast<char>(stream);
  auto n = static_cast<std::uint32_t>(payload.size());
  out[4] = static_cast<char>((n >> 24) & 0xff);
  out[5] = static_cast<char>((n >> 16) & 0xff);
  out[6] = static_cast<char>((n >> 8) & 0xff);
  out[7] = static_cast<char>(n & 0xff);
  return out + payload;
}

struct collected {
  std::string bytes;
  std::vector<int> streams;
};

} // namespace

TEST_CASE("docker log demux passes payloads of stdout and stderr frames") {
  collected got;
  docker_log_demux demux{[&](int stream, std::string_view bytes) {
    got.bytes.append(bytes);
    got.streams.push_back(stream);
  }};
  CHECK(demux.feed(frame(1, "out\n") + frame(2, "err\n")));
  CHECK(got.bytes == "out\nerr\n");
  CHECK(got.streams == std::vector<int>{1, 2});
  CHECK(demux.at_frame_boundary());
}

TEST_CASE("docker log demux handles frames split at every byte") {
  std::string payload(70000, 'y');
  payload += "\nlast";
  auto stream = frame(1, payload) + frame(2, "") + frame(2, "tail");
  std::string got;
  docker_log_demux demux{
    [&](int, std::string_view bytes) { got.append(bytes); }};
  for (char c : stream) {
    REQUIRE(demux.feed(std::string_view{&c, 1}));
  }
  CHECK(got == payload + "tail");
  CHECK(demux.at_frame_boundary());
}

TEST_CASE("docker log demux reports a stream cut inside a frame") {
  std::string got;
  docker_log_demux demux{
    [&](int, std::string_view bytes) { got.append(bytes); }};
  auto full = frame(1, "abcdef");
  CHECK(demux.feed(full.substr(0, 10)));
  CHECK(got == "ab");
  CHECK_FALSE(demux.at_frame_boundary());
  docker_log_demux header_only{[](int, std::string_view) {}};
  CHECK(header_only.feed(full.substr(0, 3)));
  CHECK_FALSE(header_only.at_frame_boundary());
}

TEST_CASE("docker log demux rejects a malformed header for good") {
  std::string got;
  docker_log_demux demux{
    [&](int, std::string_view bytes) { got.append(bytes); }};
  // What a TTY container sends: raw text, no frames.
  CHECK_FALSE(demux.feed("hello world\n"));
  CHECK_THAT(demux.error(), Catch::Contains("malformed log stream"));
  CHECK_FALSE(demux.feed(frame(1, "later")));
  CHECK(got.empty());
  CHECK_FALSE(demux.at_frame_boundary());
}

#pragma once

// Reading from a test's socket with a bound on the wait. Shared by the app
// and integration tests of the HTTP server.

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

namespace tasksup::test {

/// Reads from `fd` until `done(text read so far)` holds, the peer closes, or
/// `limit` passes; returns what was read.
template<class Done>
std::string read_until(int fd, Done done, std::chrono::milliseconds limit) {
  using steady = std::chrono::steady_clock;
  std::string out;
  auto deadline = steady::now() + limit;
  while (!done(out)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - steady::now());
    if (left.count() <= 0)
      break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    char buf[8192];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

/// Reads from `fd` until the peer closes or `limit` passes.
inline std::string
read_all(int fd, std::chrono::milliseconds limit = std::chrono::seconds{15}) {
  return read_until(
    fd, [](const std::string&) { return false; }, limit);
}

} // namespace tasksup::test

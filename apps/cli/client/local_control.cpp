#include "local_control.hpp"

#include "exit_status.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <iostream>
#include <string_view>
#include <utility>

namespace tasksup::app {

namespace {

/// Waits until `fd` is ready for `events`; false on timeout (`errno` 0) or
/// error.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (n > 0)
      return true;
    if (n == 0) {
      errno = 0;
      return false;
    }
    if (errno != EINTR)
      return false;
  }
}

/// The status code and body of a complete HTTP/1.1 response; nullopt when
/// `text` is not one.
std::optional<local_answer> parse_response(const std::string& text) {
  // "HTTP/1.1 200 OK\r\n"
  if (text.compare(0, 9, "HTTP/1.1 ") != 0 || text.size() < 12)
    return std::nullopt;
  local_answer out;
  auto [end, ec] =
    std::from_chars(text.data() + 9, text.data() + 12, out.status);
  if (ec != std::errc{} || end != text.data() + 12)
    return std::nullopt;
  auto head_end = text.find("\r\n\r\n");
  if (head_end == std::string::npos)
    return std::nullopt;
  // The server closes after the body (Connection: close); Content-Length
  // tells a complete body from a cut one.
  std::size_t length = 0;
  bool have_length = false;
  std::size_t at = text.find("\r\n") + 2;
  while (at < head_end) {
    auto eol = text.find("\r\n", at);
    auto line = std::string_view{text}.substr(at, eol - at);
    at = eol + 2;
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      continue;
    auto name = std::string{line.substr(0, colon)};
    for (auto& c : name)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name != "content-length")
      continue;
    auto value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ')
      value.remove_prefix(1);
    auto r = std::from_chars(value.data(), value.data() + value.size(), length);
    if (r.ec != std::errc{})
      return std::nullopt;
    have_length = true;
  }
  auto body_at = head_end + 4;
  if (have_length && text.size() - body_at != length)
    return std::nullopt;
  out.body = text.substr(body_at);
  return out;
}

} // namespace

std::optional<uid_t> socket_peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return std::nullopt;
  return cred.uid;
}

std::string control_socket_path(const std::string& state_dir,
                                std::uint16_t port) {
  return state_dir + "/control-" + std::to_string(port) + ".sock";
}

std::optional<local_connection> local_connection::open(const std::string& path,
                                                       local_failure& failure) {
  failure = local_failure{};
  auto not_sent = [&](std::string why) {
    failure.text = std::move(why);
    return std::nullopt;
  };
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return not_sent(path + ": " + std::strerror(errno));
  if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid())
    return not_sent(path + ": not a socket of this user");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return not_sent(path + ": the path is too long for a socket");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  local_connection conn{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (conn.fd_ < 0)
    return not_sent(std::string{"socket: "} + std::strerror(errno));
  // A stale socket (its node gone) refuses at once.
  if (::connect(conn.fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return not_sent(path + ": " + std::strerror(errno));
  // The file was this user's when we looked; the process listening is too
  // (a socket swapped in between would fail here).
  if (socket_peer_uid(conn.fd_) != ::geteuid())
    return not_sent(path + ": not served by this user");
  return conn;
}

local_connection::local_connection(local_connection&& other) noexcept
  : fd_(std::exchange(other.fd_, -1)) {}

local_connection&
local_connection::operator=(local_connection&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

local_connection::~local_connection() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::optional<local_answer> local_connection::exchange(
  const std::string& method, const std::string& target, const std::string& body,
  std::chrono::milliseconds timeout, local_failure& failure) {
  failure = local_failure{};
  auto lost = [&](const char* what) {
    failure.timeout = errno == 0;
    failure.text = failure.timeout
                     ? std::string{"no answer"}
                     : std::string{what} + ": " + std::strerror(errno);
    return std::nullopt;
  };
  std::string request = method + " " + target +
                        " HTTP/1.1\r\nHost: localhost\r\nConnection: "
                        "close\r\nContent-Type: application/json\r\n"
                        "Content-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body;
  std::size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_for(fd_, POLLOUT, timeout))
      return lost("send");
    auto n = ::send(fd_, request.data() + sent, request.size() - sent,
                    MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return lost("send");
    }
    sent += static_cast<std::size_t>(n);
  }
  std::string text;
  char buf[64 * 1024];
  for (;;) {
    if (!wait_for(fd_, POLLIN, timeout))
      return lost("receive");
    auto n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return lost("receive");
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(std::exchange(fd_, -1));
  auto answer = parse_response(text);
  if (!answer) {
    failure.text = "the answer was cut short or not HTTP";
    return std::nullopt;
  }
  return answer;
}

int report_node_failure(const std::string& command, const std::string& address,
                        bool refused, bool timeout, const std::string& text,
                        int refusal_status) {
  if (timeout) {
    std::cerr << "tasksup " << command << ": the node at " << address
              << " did not answer within " << node_request_timeout.count()
              << "s\n";
    return exit_status::unavailable;
  }
  if (!refused) {
    std::cerr << "tasksup " << command << ": the node at " << address
              << " failed the request: " << text << '\n';
    return exit_status::unavailable;
  }
  std::cerr << "tasksup " << command << ": " << text << '\n';
  return refusal_status;
}

} // namespace tasksup::app

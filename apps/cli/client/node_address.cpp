#include "node_address.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>

namespace tasksup::app {

std::string node_address::to_string() const {
  auto p = std::to_string(port);
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + p;
  return host + ":" + p;
}

expected<node_address> parse_node_address(std::string_view text,
                                          bool allow_port_zero) {
  auto bad = [&](const std::string& why) {
    return error{{},
                 {},
                 "invalid node address '" + std::string{text} + "': " + why +
                   " (expected HOST:PORT, e.g. 127.0.0.1:" +
                   std::to_string(default_node_port) + ")"};
  };
  node_address out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':')
      return bad("an IPv6 address must be written [ADDRESS]:PORT");
    out.host = std::string{text.substr(1, close - 1)};
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return bad("no port");
    if (text.find(':') != colon)
      return bad("an IPv6 address must be written [ADDRESS]:PORT");
    out.host = std::string{text.substr(0, colon)};
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty())
    return bad("no host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(),
                                   port_text.data() + port_text.size(), value);
  if (port_text.empty() || ec != std::errc{} ||
      end != port_text.data() + port_text.size() || value > 65535)
    return bad("the port must be a number from 1 to 65535");
  if (value == 0 && !allow_port_zero)
    return bad("the port must be a number from 1 to 65535");
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

std::string default_node_text() {
  if (const char* env = std::getenv("TASKSUP_NODE"); env && *env)
    return env;
  return "127.0.0.1:" + std::to_string(default_node_port);
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost")
    return true;
  std::string h{host};
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

listen_probe probe_listening(const node_address& addr,
                             std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  auto port = std::to_string(addr.port);
  auto rc = ::getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &found);
  if (rc == EAI_NONAME)
    return listen_probe::nothing;
  if (rc != 0 || found == nullptr)
    return listen_probe::unknown;
  auto result = listen_probe::nothing;
  for (auto* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (fd < 0) {
      result = listen_probe::unknown;
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        auto n = ::poll(&p, 1, static_cast<int>(timeout.count()));
        socklen_t len = sizeof err;
        if (n == 1)
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        else
          err = ETIMEDOUT;
      }
    }
    ::close(fd);
    if (err == 0) {
      result = listen_probe::listening;
      break;
    }
    if (err != ECONNREFUSED)
      result = listen_probe::unknown;
  }
  ::freeaddrinfo(found);
  return result;
}

std::string nothing_listening_text(const node_address& addr,
                                   const std::string& source) {
  auto out = "cannot reach the node at " + addr.to_string() +
             ": no tasksup node is listening there";
  if (source == "the current node")
    out += " (the current node, recorded by `tasksup serve` or `tasksup "
           "context use`; start it again, pass --node, or forget it with "
           "`tasksup context clear`)";
  else if (source == "the default")
    out += " (start one with `tasksup serve`, or pass --node HOST:PORT)";
  else
    out += " (from " + source + "; start one there with `tasksup serve`)";
  return out;
}

} // namespace tasksup::app

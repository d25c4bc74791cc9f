#include "listen_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tasksup::app {

int open_listener(const std::string& host, std::uint16_t port,
                  std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
      rc != 0) {
    err = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  std::string last_error = "no address";
  int listener = -1;
  for (auto* ai = res; ai != nullptr && listener < 0; ai = ai->ai_next) {
    int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (fd < 0)
      continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::listen(fd, SOMAXCONN) == 0) {
      listener = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listener < 0)
    err = last_error;
  return listener;
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0)
    return 0;
  if (bound.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (bound.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return 0;
}

} // namespace tasksup::app

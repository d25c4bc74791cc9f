#include "listen_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

int open_unix_listener(const std::string& path, std::string& err) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    err = "the path is longer than a socket's " +
          std::to_string(sizeof addr.sun_path - 1) + " bytes";
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = std::strerror(errno);
    return -1;
  }
  auto fail = [&](std::string why) {
    err = std::move(why);
    ::close(fd);
    return -1;
  };
  if (::bind(fd, sa, sizeof addr) != 0) {
    if (errno != EADDRINUSE)
      return fail(std::strerror(errno));
    // Left by a process that is gone, or served by a live one?
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && ::connect(probe, sa, sizeof addr) == 0;
    auto probe_errno = errno;
    if (probe >= 0)
      ::close(probe);
    if (live)
      return fail("another process serves it");
    if (probe_errno != ECONNREFUSED && probe_errno != ENOENT)
      return fail(std::strerror(probe_errno));
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
      return fail("a file that is not a socket is in the way");
    ::unlink(path.c_str());
    if (::bind(fd, sa, sizeof addr) != 0)
      return fail(std::strerror(errno));
  }
  // Only the owner may connect (the server checks each peer too).
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::unlink(path.c_str());
    return fail(why);
  }
  return fd;
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

#include "service_notify.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace tasksup::app {

bool notify_service_manager(const std::string& state) {
  auto* name = std::getenv("NOTIFY_SOCKET");
  if (name == nullptr || *name == '\0')
    return false;
  std::string path{name};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((path.front() != '/' && path.front() != '@') ||
      path.size() >= sizeof addr.sun_path)
    return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // An abstract name starts with a NUL byte and is not NUL-terminated.
  if (path.front() == '@')
    addr.sun_path[0] = '\0';
  auto len =
    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() +
                           (path.front() == '/' ? 1 : 0));
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  auto sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr*>(&addr), len);
  ::close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

} // namespace tasksup::app

#include "service_notify.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace tasksup::app;

namespace {

/// A datagram socket bound at `name` (a path, or '@' for an abstract one).
struct listener {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  explicit listener(const std::string& name) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    if (name.front() == '@')
      addr.sun_path[0] = '\0';
    auto len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  ~listener() { ::close(fd); }

  /// What arrived (already: the sender has returned), or "".
  std::string received() const {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1)
      return {};
    char buf[512];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  }
};

} // namespace

TEST_CASE("service_notify: the state goes to $NOTIFY_SOCKET, a path or an "
          "abstract name, and nowhere without it") {
  ::unsetenv("NOTIFY_SOCKET");
  CHECK_FALSE(notify_service_manager("READY=1"));

  tasksup::test::temp_dir dir{"notify"};
  auto path = dir.path + "/notify.sock";
  listener at_path{path};
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  CHECK(notify_service_manager("READY=1\nSTATUS=listening"));
  CHECK(at_path.received() == "READY=1\nSTATUS=listening");

  auto abstract = "@tasksup-notify-test-" + std::to_string(::getpid());
  listener named{abstract};
  ::setenv("NOTIFY_SOCKET", abstract.c_str(), 1);
  CHECK(notify_service_manager("STOPPING=1"));
  CHECK(named.received() == "STOPPING=1");

  // Not a socket name systemd would give: nothing sent, no harm done.
  ::setenv("NOTIFY_SOCKET", "relative/path", 1);
  CHECK_FALSE(notify_service_manager("READY=1"));
  ::unsetenv("NOTIFY_SOCKET");
}

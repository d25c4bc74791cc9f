// tasksup-shim --serve: the attempts of one task, one after the other, each
// asked for on the runtime's socket (shim_main.cpp says how).

#include "shim.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tasksup::agent_shim {

namespace {

// ---- serving a task's attempts -----------------------------------------

/// A request read from the runtime, with the two pipes it brought.
struct received {
  dt::shim_request request;
  int out = -1;
  int err = -1;
};

/// Reads exactly `size` bytes; false on end of file or an error. The first
/// read also takes the descriptors sent with the request.
bool read_request_bytes(int sock, char* into, std::size_t size,
                        std::vector<int>* fds) {
  std::size_t got = 0;
  while (got < size) {
    iovec iov{into + got, size - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fds != nullptr) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
    }
    auto n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    if (fds != nullptr) {
      for (auto* c = CMSG_FIRSTHDR(&msg); c != nullptr;
           c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
          continue;
        auto count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t k = 0; k < count; ++k) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
          fds->push_back(fd);
        }
      }
      fds = nullptr; // they come with the first byte only
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

/// The next request, or nothing when the runtime hung up; a request that
/// is not one ends the shim (the runtime sees it hang up).
std::optional<received> next_request(int sock) {
  std::vector<int> fds;
  unsigned char head[4];
  if (!read_request_bytes(sock, reinterpret_cast<char*>(head), sizeof head,
                          &fds)) {
    for (int fd : fds)
      ::close(fd);
    return std::nullopt;
  }
  std::uint32_t size = static_cast<std::uint32_t>(head[0]) |
                       static_cast<std::uint32_t>(head[1]) << 8 |
                       static_cast<std::uint32_t>(head[2]) << 16 |
                       static_cast<std::uint32_t>(head[3]) << 24;
  if (fds.size() != 2 || size > dt::max_request_bytes)
    die("malformed request from the runtime (" + std::to_string(fds.size()) +
        " descriptors, " + std::to_string(size) + " bytes)");
  std::string payload(size, '\0');
  if (!read_request_bytes(sock, payload.data(), payload.size(), nullptr))
    die("the runtime hung up in the middle of a request");
  auto req = dt::parse_shim_request(payload);
  if (!req)
    die(req.error().to_string());
  return received{std::move(*req), fds[0], fds[1]};
}

/// Drops the signals that came while no attempt ran (they were for one
/// that has ended) and reaps what the last agent left.
void drain_idle_signals(int signal_fd) {
  signalfd_siginfo info;
  while (::read(signal_fd, &info, sizeof info) ==
         static_cast<ssize_t>(sizeof info)) {
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

} // namespace

int serve(const options& base, int signal_fd) {
  const int sock = 0;
  int last_pipes[2] = {-1, -1};
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  for (;;) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {sock, POLLIN, 0}};
    auto n = ::poll(fds, 2, -1);
    if (n < 0 && errno != EINTR)
      die(std::string{"poll failed: "} + std::strerror(errno));
    // A signal sent before the next request is pending by the time the
    // request can be read: it is dropped first, so it never reaches the
    // next attempt's agent.
    drain_idle_signals(signal_fd);
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) == 0)
      continue;
    auto got = next_request(sock);
    // The last attempt's pipes: the runtime has read them to the end.
    for (int& fd : last_pipes)
      if (fd >= 0)
        ::close(std::exchange(fd, -1));
    if (!got)
      return 0;
    auto o = base;
    auto& r = got->request;
    // Its directory names the attempts it runs (is_shim_of checks that).
    if (r.attempt_dir.substr(0, r.attempt_dir.rfind('/')) != base.serve_dir)
      die("request for " + r.attempt_dir + ", which is not in " +
          base.serve_dir);
    o.attempt_dir = r.attempt_dir;
    o.log_bytes = r.log_bytes;
    o.drain = std::chrono::milliseconds{r.drain_ms};
    o.group = std::chrono::milliseconds{r.group_ms};
    o.cgroup = r.cgroup;
    o.cwd = r.cwd;
    o.arg_strings = std::move(r.argv);
    o.env_strings = std::move(r.env);
    for (auto& a : o.arg_strings)
      o.argv.push_back(a.data());
    o.argv.push_back(nullptr);
    for (auto& e : o.env_strings)
      o.envp.push_back(e.data());
    o.envp.push_back(nullptr);
    o.out_fd = got->out;
    o.err_fd = got->err;
    shim s{std::move(o), signal_fd, sock, true};
    s.run();
    if (s.runtime_gone())
      return 0;
    // Everything the agent wrote is in the pipes by now: the end says so,
    // and the runtime reads them to where they are without waiting for
    // them to hang up (they are closed when the next request comes).
    last_pipes[0] = got->out;
    last_pipes[1] = got->err;
    write_all(sock, dt::encode_attempt_end(s.record_text()));
  }
}

} // namespace tasksup::agent_shim

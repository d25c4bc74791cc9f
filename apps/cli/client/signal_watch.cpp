#include "signal_watch.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <ctime>
#include <system_error>
#include <utility>

namespace tasksup::app {

namespace {

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

} // namespace

signal_watch::signal_watch(std::initializer_list<int> signals,
                           handler on_signal)
  : on_signal_(std::move(on_signal)) {
  sigemptyset(&set_);
  for (int sig : signals)
    sigaddset(&set_, sig);
  ::pthread_sigmask(SIG_BLOCK, &set_, &previous_);
  signal_fd_ = ::signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK);
  int err = errno;
  if (signal_fd_ >= 0) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    err = errno;
  }
  if (signal_fd_ < 0 || stop_fd_ < 0) {
    close_fd(signal_fd_);
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
    throw std::system_error{err, std::generic_category(),
                            "cannot watch signals (signalfd/eventfd)"};
  }
  thread_ = std::thread{[this] { run(); }};
}

signal_watch::~signal_watch() {
  std::uint64_t one = 1;
  // Cannot fail short of a bad descriptor: the counter is far from full.
  [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
  thread_.join();
  close_fd(signal_fd_);
  close_fd(stop_fd_);
  // A signal that arrived after the thread stopped waiting stays pending;
  // drop it rather than letting it kill the process on unblocking.
  timespec zero{0, 0};
  while (::sigtimedwait(&set_, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void signal_watch::run() {
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    // Once destruction began no callback runs, even for a pending signal.
    if (fds[1].revents != 0)
      return;
    if ((fds[0].revents & POLLIN) == 0)
      continue;
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) ==
           static_cast<ssize_t>(sizeof info)) {
      auto count = ++count_;
      if (on_signal_)
        on_signal_(static_cast<int>(info.ssi_signo), count);
    }
  }
}

} // namespace tasksup::app

#include "attempt_io.hpp"

#include <cerrno>

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

attempt_io::~attempt_io() {
  close_fd(epoll_fd_);
  close_fd(wake_fd_);
}

std::string attempt_io::open() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    return "process runtime: cannot set up its reactor: " + errno_text(errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(0, kind_wake);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
    return "process runtime: cannot watch its wake-up descriptor: " +
           errno_text(errno);
  read_buf_.resize(64 * 1024);
  return {};
}

void attempt_io::wake() {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
}

int attempt_io::wait(std::vector<epoll_event>& events, int timeout) {
  int n = ::epoll_wait(epoll_fd_, events.data(),
                       static_cast<int>(events.size()), timeout);
  if (n < 0 && errno != EINTR) {
    warn_("process runtime: epoll_wait failed: " + errno_text(errno));
    n = 0;
  }
  n = std::max(n, 0);
  // The wake-up descriptor is read before the commands are taken, so a
  // command posted after that writes again.
  for (int i = 0; i < n; ++i) {
    if ((events[static_cast<std::size_t>(i)].data.u64 & 3) == kind_wake) {
      std::uint64_t count;
      [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof(count));
    }
  }
  return n;
}

int attempt_io::watch(attempt& a) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  std::vector<int> added;
  for (auto [fd, kind] :
       {std::pair{a.served ? a.control_fd : a.pidfd, kind_exit},
        std::pair{a.output_fd, kind_output},
        std::pair{a.error_fd, kind_error}}) {
    if (fd < 0)
      continue;
    ev.data.u64 = key(a.id, kind);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      auto err = errno;
      for (auto done : added)
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, done, nullptr);
      return err;
    }
    added.push_back(fd);
  }
  return 0;
}

bool attempt_io::watch_exit(std::uint64_t id, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(id, kind_exit);
  return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void attempt_io::unwatch(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

std::optional<std::uint64_t> attempt_io::take_due(clock_type::time_point now) {
  if (deadlines_.empty() || deadlines_.top().first > now)
    return std::nullopt;
  auto id = deadlines_.top().second;
  deadlines_.pop();
  return id;
}

bool attempt_io::read_output(attempt& a, output_stream stream) {
  auto& fd = stream == output_stream::err ? a.error_fd : a.output_fd;
  std::size_t total = 0;
  while (total < max_read_per_turn) {
    auto n = ::read(fd, read_buf_.data(), read_buf_.size());
    if (n > 0) {
      a.capture->feed(stream, {read_buf_.data(), static_cast<std::size_t>(n)});
      total += static_cast<std::size_t>(n);
      // The receiver is behind: read no more (of either stream) until it
      // asks; the agent blocks once its pipe is full.
      if (a.capture->full()) {
        set_paused(a, true);
        return false;
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return false;
    // EOF (or a broken pipe, which means the same here).
    close_stream(fd);
    if (a.output_fd < 0 && a.error_fd < 0) {
      a.eof = true;
      return true;
    }
    return false;
  }
  return false;
}

bool attempt_io::drain_after_end(attempt& a) {
  // One stream after the other keeps their order: the shim writes to one
  // only once the other has been read, so at most one holds anything.
  for (auto stream : {output_stream::out, output_stream::err}) {
    auto& fd = stream == output_stream::err ? a.error_fd : a.output_fd;
    while (fd >= 0) {
      auto n = ::read(fd, read_buf_.data(), read_buf_.size());
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        // Empty (the shim wrote everything before its end), ended or
        // broken: this stream is done.
        close_stream(fd);
        break;
      }
      a.capture->feed(stream, {read_buf_.data(), static_cast<std::size_t>(n)});
      if (a.capture->full()) {
        set_paused(a, true);
        return false;
      }
    }
  }
  a.eof = true;
  return true;
}

bool attempt_io::follow_log(attempt& a) {
  auto r = a.log.follow(*a.capture, a.delivering, read_buf_, warn_);
  if (r == log_follower::result::full) {
    set_paused(a, true);
    return false;
  }
  return r == log_follower::result::done;
}

bool attempt_io::take_end(attempt& a) {
  for (;;) {
    auto end = parse_attempt_end(a.end_bytes);
    if (!end) {
      // Not a shim of ours any more: it serves nothing else.
      warn_("process runtime: " + end.error().to_string());
      a.shim_ok = false;
      return true;
    }
    if (*end) {
      auto path = a.attempt_dir + "/" + std::string{exit_record_name};
      if (auto rec = parse_exit_record(**end, path))
        a.record = std::move(*rec);
      a.shim_ok = true;
      return true;
    }
    char buf[1024];
    auto n = ::recv(a.control_fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return false; // more to come
    if (n <= 0) {
      a.shim_ok = false; // it hung up
      return true;
    }
    a.end_bytes.append(buf, static_cast<std::size_t>(n));
  }
}

void attempt_io::set_paused(attempt& a, bool paused) {
  if (a.paused == paused)
    return;
  a.paused = paused;
  if (!paused)
    a.capture->resume();
  // After a serving shim's end the pipes are read to where they are, not
  // watched (they do not hang up).
  if (!paused && a.served && a.shim_ok) {
    schedule(clock_type::now(), a.id);
    return;
  }
  // Out of the epoll set while paused: a pipe whose writer has gone would
  // report EPOLLHUP on every turn even with no events asked for.
  epoll_event ev{};
  ev.events = EPOLLIN;
  for (auto [fd, kind] : {std::pair{a.output_fd, kind_output},
                          std::pair{a.error_fd, kind_error}}) {
    if (fd < 0)
      continue;
    ev.data.u64 = key(a.id, kind);
    if (paused)
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    else
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  if (!paused && a.adopted) {
    // Reading the log goes on at once.
    a.drain_until = clock_type::now() +
                    (a.exited ? drain_timeout_ : std::chrono::milliseconds{0});
    schedule(clock_type::now(), a.id);
    return;
  }
  // The drain after the agent's exit waits for the receiver, not against it.
  if (!paused && a.exited && !a.eof) {
    auto at = clock_type::now() + drain_timeout_;
    a.drain_until = at;
    schedule(at, a.id);
  }
}

void attempt_io::close_stream(int& fd) {
  if (fd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close_fd(fd);
  }
}

void attempt_io::close_output(attempt& a) {
  close_stream(a.output_fd);
  close_stream(a.error_fd);
  a.eof = true;
}

} // namespace tasksup::runtime::detail

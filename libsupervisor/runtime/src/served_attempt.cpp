#include "process_reactor.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

std::shared_ptr<attempt_handle> reactor::start_served(attempt_ptr a,
                                                      shim_request request) {
  auto fail = [&](std::string text) {
    a->never_ran(std::move(text));
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    return submit(std::move(a));
  };
  // One pipe per stream, so each line keeps the stream it came from; the
  // shim gets their write ends with the request.
  // Both ends non-blocking: we read ours from the reactor, the shim writes
  // to its own without ever waiting (the agent has pipes of the shim's).
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC | O_NONBLOCK) != 0)
    return fail("cannot create the output pipe: " + errno_text(errno));
  a->output_fd = out[0];
  if (::pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0) {
    auto e = errno;
    close_fd(out[1]);
    return fail("cannot create the error pipe: " + errno_text(e));
  }
  a->error_fd = err[0];
  auto close_ours = [&] {
    close_fd(out[1]);
    close_fd(err[1]);
  };
  auto dir = request.attempt_dir.substr(0, request.attempt_dir.rfind('/'));
  auto payload = encode_shim_request(request);
  a->served = true;
  a->serve_dir = dir;
  a->started = clock_type::now();
  // An idle shim may have died since its last attempt (killed, or it could
  // not go on): then a fresh one.
  for (;;) {
    auto shim = pool_.take_idle(dir);
    bool fresh = !shim;
    std::string error;
    if (fresh)
      shim = pool_.spawn(dir, error);
    if (!shim) {
      close_ours();
      return fail(std::move(error));
    }
    // The report of the agent's start is not waited for here: the reactor
    // reads it (take_report). A thread that slept for it here was, on a
    // machine with few CPUs, often woken only once the agent it had just
    // started was done, and the attempt's exit waited for it (BENCHMARKS.md
    // §7).
    if (send_shim_request(shim->sock, payload, out[1], err[1],
                          options_.shim_report_timeout)) {
      if (fresh) {
        close_ours();
      } else {
        // Should it have died since its last attempt, a fresh one is
        // asked (report_failed).
        a->retry_request = std::move(payload);
        a->retry_out = out[1];
        a->retry_err = err[1];
      }
      a->pid = shim->pid;
      a->pidfd = shim->pidfd;
      a->control_fd = shim->sock;
      a->id_later = true;
      a->report_pending = true;
      a->report_due = clock_type::now() + options_.shim_report_timeout;
      return submit(std::move(a));
    }
    // It took no request (an idle one that died since its last attempt):
    // hung up first, so a shim that ends once it killed the agent does.
    close_fd(shim->sock);
    stop_unreported_shim(shim->pid, shim->pidfd, request.attempt_dir);
    shim->pid = -1; // reaped
    discard_shim(*shim);
    if (fresh) {
      close_ours();
      return fail("tasksup-shim ended before it started the agent");
    }
  }
}

bool reactor::ask_fresh_shim(attempt& a) {
  std::string error;
  auto shim = pool_.spawn(a.serve_dir, error);
  if (!shim) {
    warn_("process runtime: " + error);
    return false;
  }
  auto sent = send_shim_request(shim->sock, a.retry_request, a.retry_out,
                                a.retry_err, options_.shim_report_timeout);
  a.forget_retry();
  if (!sent || !io_.watch_exit(a.id, shim->sock)) {
    close_fd(shim->sock);
    stop_unreported_shim(shim->pid, shim->pidfd, a.attempt_dir);
    shim->pid = -1; // reaped
    discard_shim(*shim);
    return false;
  }
  a.pid = shim->pid;
  a.pidfd = shim->pidfd;
  a.control_fd = shim->sock;
  a.report_pending = true;
  a.report_due = clock_type::now() + options_.shim_report_timeout;
  io_.schedule(a.report_due, a.id);
  return true;
}

void reactor::announce(attempt& a, std::string id) {
  if (!a.id_later || std::exchange(a.announced, true))
    return;
  if (auto handle = a.handle.lock())
    handle->set_id(id);
  if (!a.cb.on_started)
    return;
  try {
    a.cb.on_started(id);
  } catch (...) {
    warn_("process runtime: an on_started callback threw");
  }
}

reactor::report_state reactor::take_report(attempt& a) {
  if (!a.report_pending)
    return report_state::taken;
  // The report is a pid and a newline, in one write. It is taken off the
  // socket alone: the attempt's end that may follow stays there, so the
  // socket still wakes the reactor for it.
  char buf[32];
  ssize_t n;
  do {
    n = ::recv(a.control_fd, buf, sizeof buf, MSG_DONTWAIT | MSG_PEEK);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return report_state::pending;
  auto got = static_cast<std::size_t>(std::max<ssize_t>(n, 0));
  auto* nl = static_cast<const char*>(std::memchr(buf, '\n', got));
  if (nl == nullptr && n > 0 && got < sizeof buf)
    return report_state::pending; // the rest of the line is on its way
  auto line = nl == nullptr ? std::size_t{0} : std::size_t(nl - buf);
  auto agent = nl == nullptr ? pid_t{-1} : report_pid({buf, line});
  if (agent < 0) {
    // It hung up, or said something else.
    // (A shim that died with our request unread resets the connection.)
    return report_failed(a, "tasksup-shim ended before it started the agent",
                         n <= 0)
             ? report_state::pending
             : report_state::failed;
  }
  while (::recv(a.control_fd, buf, line + 1, MSG_DONTWAIT) < 0 &&
         errno == EINTR) {
  }
  a.report_pending = false;
  a.agent_pid = agent;
  a.forget_retry();
  announce(a, agent > 0 ? std::to_string(agent) : std::string{});
  // What was asked for while the shim could still drop it.
  if (auto sig = std::exchange(a.deferred_signal, 0); sig != 0) {
    signal_group(a, sig);
    if (sig == SIGTERM)
      signal_group(a, SIGCONT);
  }
  // A stop's kill that came due meanwhile is due again.
  if (a.kill_at)
    io_.schedule(*a.kill_at, a.id);
  return report_state::taken;
}

bool reactor::report_failed(attempt& a, std::string error, bool hung_up) {
  a.report_pending = false;
  // Hung up first, so a shim that ends once it killed the agent does.
  close_fd(a.control_fd);
  // A shim that is still there (it neither reported nor hung up) is given
  // its grace without this thread waiting for it: the attempt is reported
  // once it is gone.
  if (!hung_up && end_unreported_shim_later(a, std::move(error)))
    return true;
  // One that hung up ends at once (or is dead), and a fresh one may be
  // asked for the attempt.
  stop_unreported_shim(a.pid, a.pidfd, a.attempt_dir);
  a.pid = -1; // reaped
  close_fd(a.pidfd);
  if (hung_up && a.retry_out >= 0 && ask_fresh_shim(a))
    return true;
  a.forget_retry();
  io_.close_output(a);
  a.never_ran(std::move(error));
  a.exited = true;
  finalize(a);
  return false;
}

bool reactor::end_unreported_shim_later(attempt& a, std::string error) {
  if (a.pidfd < 0 || a.pid <= 0)
    return false;
  if (!io_.watch_exit(a.id, a.pidfd))
    return false;
  pidfd_signal(a.pidfd, SIGUSR1);
  a.ending_shim = true;
  a.never_ran(std::move(error));
  a.forget_retry();
  io_.close_output(a);
  a.kill_at =
    clock_type::now() + std::chrono::milliseconds{unreported_shim_grace_ms};
  io_.schedule(*a.kill_at, a.id);
  return true;
}

void reactor::unreported_shim_ended(attempt& a) {
  io_.unwatch(a.pidfd);
  while (::waitpid(a.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  kill_recorded_agent(a.pid, a.attempt_dir);
  a.pid = -1; // reaped
  close_fd(a.pidfd);
  a.kill_at.reset();
  a.exited = true;
  a.ended = clock_type::now();
  finalize(a);
}

void reactor::release_shim(attempt& a) {
  if (a.pid <= 0)
    return;
  served_shim s;
  s.pid = std::exchange(a.pid, -1);
  s.pidfd = std::exchange(a.pidfd, -1);
  s.sock = std::exchange(a.control_fd, -1);
  s.dir = a.serve_dir;
  s.idle_since = clock_type::now();
  // Its end took the socket off the watch list already.
  if (!a.exited)
    io_.unwatch(s.sock);
  if (!a.shim_ok && !a.exited)
    // Still running the agent (the runtime is closing): it goes with it.
    pidfd_signal(s.pidfd, SIGUSR1);
  pool_.release(std::move(s), a.shim_ok && !closing());
}

} // namespace tasksup::runtime::detail

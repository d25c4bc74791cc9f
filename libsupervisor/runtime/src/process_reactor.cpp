#include "process_reactor.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::runtime::detail {

namespace {

namespace fs = std::filesystem;

/// How long a shim that did not report the agent's start is given to end
/// once told to (SIGUSR1) before it is killed.
constexpr int unreported_shim_grace_ms = 1000;

/// How often an adopted attempt's log is looked at for new output.
constexpr std::chrono::milliseconds follow_interval{50};

// A cgroup directory name from task id and attempt: no slashes, no dots
// alone, bounded length.
std::string cgroup_name_for(const std::string& task_id, int attempt) {
  std::string name;
  for (char c : task_id.substr(0, 200))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
              ? c
              : '_';
  if (name.empty())
    name = "task";
  return name + "-" + std::to_string(attempt);
}

/// The attempt directory as the shim is told it (and as its command line
/// shows it): absolute, normalised, without a trailing slash.
std::string shim_dir_of(const std::string& dir) {
  std::error_code ec;
  auto p = fs::absolute(dir, ec);
  if (ec)
    p = dir;
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path())
    p = p.parent_path();
  return p.string();
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

int pidfd_signal(int pidfd, int sig) {
  return static_cast<int>(
    ::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

/// The pid in a shim's report (`digits`, the line without its newline);
/// -1 when it is not one.
pid_t report_pid(std::string_view digits) {
  long pid = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || pid >= 1 << 23)
      return -1;
    pid = pid * 10 + (c - '0');
  }
  return digits.empty() ? -1 : static_cast<pid_t>(pid);
}

/// Reads the shim's report (the agent's pid and a newline) from `fd`:
/// the pid, 0 when the agent could not start, -1 when the shim said nothing
/// (it failed before starting the agent), -2 when it did not answer in time.
pid_t read_shim_report(int fd, std::chrono::milliseconds timeout) {
  char buf[32];
  std::size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got < sizeof buf) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0)
      return -2;
    pollfd p{fd, POLLIN, 0};
    auto r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return r == 0 ? -2 : -1;
    auto n = ::read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += static_cast<std::size_t>(n);
    if (std::memchr(buf, '\n', got) != nullptr)
      break;
  }
  auto* nl = static_cast<const char*>(std::memchr(buf, '\n', got));
  return nl == nullptr ? -1
                       : report_pid({buf, static_cast<std::size_t>(nl - buf)});
}

} // namespace

std::optional<served_shim> reactor::take_idle_shim(const std::string& dir) {
  std::lock_guard<std::mutex> guard{shims_mtx_};
  auto it = idle_shims_.find(dir);
  if (it == idle_shims_.end())
    return std::nullopt;
  auto s = std::move(it->second);
  idle_shims_.erase(it);
  return s;
}

std::string reactor::not_reported_text() const {
  return "tasksup-shim did not report the agent's start within " +
         std::to_string(options_.shim_report_timeout.count()) + " ms";
}

namespace {

/// Kills the agent group that the shim `pid` recorded in `attempt_dir`,
/// once that shim is gone (it would otherwise run on, unwatched).
void kill_recorded_agent(pid_t pid, const std::string& attempt_dir) {
  auto path = attempt_dir + "/" + std::string{shim_record_name};
  if (auto text = read_small_file(path))
    if (auto rec = parse_shim_record(*text, path); rec && rec->shim_pid == pid)
      kill_group_members(rec->agent_pgid, rec->agent_start, attempt_dir);
}

} // namespace

void reactor::stop_unreported_shim(pid_t pid, int pidfd,
                                   const std::string& attempt_dir) {
  // It may have started the agent: SIGUSR1 has it kill the agent's group
  // and end. One that does not end in time is killed, and so is the group
  // its record names.
  if (pidfd >= 0) {
    pidfd_signal(pidfd, SIGUSR1);
    pollfd p{pidfd, POLLIN, 0};
    while (::poll(&p, 1, unreported_shim_grace_ms) < 0 && errno == EINTR) {
    }
    pidfd_signal(pidfd, SIGKILL);
  } else {
    ::kill(pid, SIGKILL);
  }
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  kill_recorded_agent(pid, attempt_dir);
}

bool reactor::end_unreported_shim_later(attempt& a, std::string error) {
  if (a.pidfd < 0 || a.pid <= 0)
    return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(a.id, kind_exit);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.pidfd, &ev) != 0)
    return false;
  pidfd_signal(a.pidfd, SIGUSR1);
  a.ending_shim = true;
  a.never_ran(std::move(error));
  a.forget_retry();
  close_output(a);
  a.kill_at =
    clock_type::now() + std::chrono::milliseconds{unreported_shim_grace_ms};
  schedule(*a.kill_at, a.id);
  return true;
}

void reactor::unreported_shim_ended(attempt& a) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
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

void reactor::discard_shim(served_shim& s) {
  close_fd(s.sock);
  if (s.pidfd >= 0)
    pidfd_signal(s.pidfd, SIGKILL);
  close_fd(s.pidfd);
  if (s.pid > 0)
    while (::waitpid(s.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  s.pid = -1;
}

std::optional<served_shim> reactor::spawn_served_shim(const std::string& dir,
                                                      std::string& error) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = "cannot create the shim's socket: " + errno_text(errno);
    return std::nullopt;
  }
  served_shim s;
  s.dir = dir;
  s.sock = sv[0];
  int theirs = sv[1];
  std::vector<std::string> args = {
    shim_path_, "--serve", dir, "--orphan",
    options_.orphans == orphan_policy::kill ? "kill" : "keep"};
  child_plan plan;
  set_command(plan, args, base_env_);
  plan.cwd = "/";
  // Stdin is the socket; a shim that cannot go on says why on our stderr
  // (when we have one).
  plan.stdin_fd = theirs;
  plan.output_fd = devnull_fd_;
  plan.error_fd = ::fcntl(2, F_GETFD) >= 0 ? 2 : devnull_fd_;
  plan.max_fd = max_fd_;
  sigemptyset(&plan.mask);
  if (!raise_fd(plan.stdin_fd)) {
    error = "cannot prepare descriptors: " + errno_text(errno);
    close_fd(theirs);
    close_fd(s.sock);
    return std::nullopt;
  }
  child_stack stack{stacks_};
  if (stack.top() == nullptr) {
    error = "cannot map a stack for the child: " + errno_text(errno);
    close_fd(plan.stdin_fd);
    close_fd(s.sock);
    return std::nullopt;
  }
  auto spawned = spawn_child(plan, stack.top());
  close_fd(plan.stdin_fd);
  if (spawned.pid < 0) {
    error = "cannot start a process: clone failed: " + errno_text(spawned.err);
    close_fd(s.sock);
    return std::nullopt;
  }
  s.pid = spawned.pid;
  s.pidfd = spawned.pidfd;
  if (plan.failed_stage != 0 || s.pidfd < 0) {
    error = plan.failed_stage == stage_exec
              ? "cannot start tasksup-shim (" + shim_path_ +
                  "): " + errno_text(plan.failed_err)
            : plan.failed_stage != 0
              ? "cannot start tasksup-shim: " +
                  std::string{stage_text(plan.failed_stage)} + ": " +
                  errno_text(plan.failed_err)
              : "cannot watch process " + std::to_string(s.pid) + ": no pidfd";
    if (s.pidfd < 0)
      ::kill(s.pid, SIGKILL);
    discard_shim(s);
    return std::nullopt;
  }
  return s;
}

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
    auto shim = take_idle_shim(dir);
    bool fresh = !shim;
    std::string error;
    if (fresh)
      shim = spawn_served_shim(dir, error);
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

std::shared_ptr<attempt_handle> reactor::finish_unposted(attempt_ptr item) {
  // The runtime is shutting down: no reactor will report this attempt.
  attempt_outcome out;
  out.exit_code = 1;
  // Why it never ran (e.g. no tasksup-shim), else the runtime is closing.
  out.infrastructure_error = item->infrastructure_error.empty()
                               ? "process runtime is shutting down"
                               : std::move(item->infrastructure_error);
  if (item->pid > 0) {
    // The shim kills the agent's group, records the end and exits (a
    // serving shim once its socket has hung up).
    pidfd_signal(item->pidfd, SIGUSR1);
    close_fd(item->control_fd);
    if (!item->adopted)
      ::waitpid(item->pid, nullptr, 0);
  }
  auto handle = item->id_later
                  ? std::make_shared<process_handle>(
                      weak_from_this(), item->id, std::chrono::milliseconds{0})
                  : std::make_shared<process_handle>(weak_from_this(), item->id,
                                                     std::string{});
  // Its id, none, first (does nothing for an attempt whose id was known).
  item->handle = handle;
  announce(*item, {});
  deliver_sync(item->cb, std::move(out));
  return handle;
}

bool reactor::ask_fresh_shim(attempt& a) {
  std::string error;
  auto shim = spawn_served_shim(a.serve_dir, error);
  if (!shim) {
    warn("process runtime: " + error);
    return false;
  }
  auto sent = send_shim_request(shim->sock, a.retry_request, a.retry_out,
                                a.retry_err, options_.shim_report_timeout);
  a.forget_retry();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(a.id, kind_exit);
  if (!sent || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, shim->sock, &ev) != 0) {
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
  schedule(a.report_due, a.id);
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
    warn("process runtime: an on_started callback threw");
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
    schedule(*a.kill_at, a.id);
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
  close_output(a);
  a.never_ran(std::move(error));
  a.exited = true;
  finalize(a);
  return false;
}

int reactor::watch(attempt& a) {
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

void reactor::abandon(attempt& a, std::string error) {
  a.report_pending = false;
  signal_group(a, SIGKILL);
  if (a.ending_shim && a.pidfd >= 0)
    pidfd_signal(a.pidfd, SIGKILL); // its grace is not waited for now
  // A serving shim ends once its socket has hung up.
  close_fd(a.control_fd);
  if (!a.adopted)
    while (::waitpid(a.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  a.pid = -1;
  close_fd(a.pidfd);
  close_fd(a.output_fd);
  close_fd(a.error_fd);
  a.never_ran(std::move(error));
}

std::shared_ptr<attempt_handle> reactor::submit(attempt_ptr item) {
  auto id = item->id;
  auto pid = item->pid;
  auto agent = item->agent_pid;
  bool wake_needed = false;
  std::shared_ptr<process_handle> handle;
  {
    std::unique_lock<std::mutex> guard{mtx_};
    if (closing_ || !thread_running_) {
      guard.unlock();
      return finish_unposted(std::move(item));
    }
    // A running attempt is watched from here, under the lock: the reactor
    // wakes on the attempt's own events, and takes it from the queue (which
    // needs this lock) before it looks at them. No wake-up write is needed
    // for it; an attempt that never ran, one whose log is followed, or one
    // whose end came with its shim's report (nothing more will come on its
    // socket) needs one.
    if (pid > 0) {
      if (auto err = watch(*item); err != 0) {
        guard.unlock();
        abandon(*item, "cannot watch process " + std::to_string(pid) + ": " +
                         errno_text(err));
        return submit(std::move(item));
      }
    }
    if (pid <= 0 || item->adopted)
      wake_needed = !std::exchange(wake_pending_, true);
    if (item->id_later)
      handle = std::make_shared<process_handle>(
        weak_from_this(), id,
        options_.shim_report_timeout +
          std::chrono::milliseconds{2 * unreported_shim_grace_ms});
    else
      handle = std::make_shared<process_handle>(
        weak_from_this(), id,
        agent > 0 ? std::to_string(agent) : std::string{});
    item->handle = handle;
    commands_.push_back(command{command::add, id, {}, std::move(item)});
  }
  if (wake_needed)
    wake();
  return handle;
}

output_capture::line_callback reactor::line_sink(attempt& a) {
  auto* self = this;
  auto* at = &a;
  auto on_line = a.cb.on_line;
  return [self, at, on_line](output_stream stream, std::string_view line) {
    if (!on_line || !at->delivering)
      return true;
    try {
      return on_line(stream, line);
    } catch (...) {
      self->warn("process runtime: an on_line callback threw");
      return true;
    }
  };
}

std::shared_ptr<attempt_handle> reactor::start(attempt_spec spec,
                                               attempt_callbacks cb) {
  auto a = std::make_unique<attempt>();
  a->id = next_id_.fetch_add(1);
  a->started = clock_type::now();
  a->cb = std::move(cb);
  a->argv0 = spec.argv.empty() ? std::string{} : spec.argv.front();
  a->attempt_dir = spec.attempt_dir;
  auto fail = [&](std::string text) {
    a->never_ran(std::move(text));
    return std::move(a);
  };
  // Every path out of here hands the attempt to the reactor, which reports
  // it exactly once (or reports it here when the reactor is gone).
  if (!init_error_.empty())
    return finish_unposted(fail(init_error_));
  if (spec.argv.empty() || spec.argv.front().empty())
    return submit(fail("attempt spec has no command (argv is empty)"));
  if (spec.attempt_dir.empty())
    return submit(fail("attempt spec has no attempt_dir"));
  for (auto& [k, v] : spec.env)
    if (k.empty() || k.find('=') != std::string::npos ||
        k.find('\0') != std::string::npos || v.find('\0') != std::string::npos)
      return submit(
        fail("attempt spec: invalid environment variable name '" + k + "'"));
  for (auto& arg : spec.argv)
    if (arg.find('\0') != std::string::npos)
      return submit(fail("attempt spec: an argument contains a NUL byte"));

  // Directories: the attempt's own, a fresh workspace and artifacts dir,
  // all private (the attempt's output and prompt end up in them).
  bool new_dir = ::mkdir(spec.attempt_dir.c_str(), private_dir_mode) == 0;
  if (!new_dir && errno == EEXIST) {
    ::chmod(spec.attempt_dir.c_str(), private_dir_mode);
  } else if (!new_dir) {
    if (auto err = make_private_dirs(spec.attempt_dir); !err.empty())
      return submit(fail(err));
    new_dir = true;
  }
  auto dir = shim_dir_of(spec.attempt_dir);
  a->attempt_dir = dir;
  a->artifacts_dir = dir + "/artifacts";
  if (auto err = fresh_dir(a->artifacts_dir); !err.empty())
    return submit(fail(err));
  auto cwd = spec.workdir;
  if (cwd.empty()) {
    cwd = dir + "/workspace";
    if (auto err = fresh_dir(cwd); !err.empty())
      return submit(fail(err));
  }
  // The task's state directory: made on its first attempt, then kept as it
  // is (never cleared between attempts).
  std::string state_dir;
  if (!spec.state_dir.empty()) {
    state_dir = shim_dir_of(spec.state_dir);
    if (auto err = make_private_dirs(state_dir); !err.empty())
      return submit(fail(err));
  }
  std::string feedback_path;
  if (!spec.feedback.empty()) {
    feedback_path = dir + "/" + std::string{feedback_file_name};
    if (auto err = write_file_atomically(feedback_path, spec.feedback);
        !err.empty())
      return submit(fail("cannot write the feedback file: " + err));
  }
  // A record left by an earlier use of the directory must not be taken for
  // this attempt's.
  if (!new_dir)
    for (auto name : {exit_record_name, shim_record_name})
      ::unlink((dir + "/" + std::string{name}).c_str());

  // Lines go to the callback on the reactor thread; the shim writes the log.
  a->log_path = dir + "/output.log";
  auto cap = output_capture::create({}, line_sink(*a), options_.output_limits);
  if (!cap)
    return submit(fail(cap.error().to_string()));
  a->capture.emplace(std::move(*cap));

  // Memory limit: a cgroup the agent joins before exec (the shim stays out
  // of it, so an OOM kill never takes the shim).
  if (spec.memory_limit_mb && *spec.memory_limit_mb > 0) {
    if (auto* ctrl = memory_controller()) {
      auto cg = detail::memory_cgroup::create(
        *ctrl, cgroup_name_for(spec.task_id, spec.attempt),
        *spec.memory_limit_mb * 1024 * 1024);
      if (cg) {
        a->cgroup.emplace(std::move(*cg));
        a->cgroup->close_procs_fd();
      } else {
        warn("process runtime: task " + spec.task_id + " attempt " +
             std::to_string(spec.attempt) +
             " runs without its memory limit: " + cg.error().to_string());
      }
    }
  }

  // Environment: the inherited minimum, the spec's, then ours. The shim
  // runs with it and passes it on unchanged.
  auto env = base_env_;
  for (auto& [k, v] : spec.env)
    env[k] = v;
  add_trace_env(spec.trace_id, spec.span_id, env);
  env["TASKSUP_TASK_ID"] = spec.task_id;
  env["TASKSUP_ATTEMPT"] = std::to_string(spec.attempt);
  env["TASKSUP_ARTIFACTS_DIR"] = a->artifacts_dir;
  env["TASKSUP_DONE_FILE"] =
    a->artifacts_dir + '/' + std::string{done_file_name};
  if (!spec.config_dir.empty())
    env["TASKSUP_AGENT_CONFIG_DIR"] = spec.config_dir;
  if (!feedback_path.empty())
    env["TASKSUP_FEEDBACK"] = std::move(feedback_path);
  if (!state_dir.empty())
    env["TASKSUP_MEMBER_STATE"] = std::move(state_dir);

  if (options_.shim_idle_timeout.count() > 0 && dir.rfind('/') > 0) {
    shim_request req;
    req.attempt_dir = dir;
    req.log_bytes = options_.output_limits.log_bytes;
    req.drain_ms = static_cast<std::uint64_t>(
      std::max<long long>(0, options_.drain_timeout.count()));
    req.group_ms = static_cast<std::uint64_t>(
      std::max<long long>(0, options_.group_exit_timeout.count()));
    if (a->cgroup)
      req.cgroup = a->cgroup->path();
    std::error_code ec;
    auto abs_cwd = fs::absolute(cwd, ec);
    req.cwd = ec ? cwd : abs_cwd.string();
    req.argv = std::move(spec.argv);
    req.env.reserve(env.size());
    for (auto& [k, v] : env)
      req.env.push_back(k + "=" + v);
    return start_served(std::move(a), std::move(req));
  }

  std::vector<std::string> args = {
    shim_path_,
    "--attempt-dir",
    dir,
    "--log-bytes",
    std::to_string(options_.output_limits.log_bytes),
    "--drain-ms",
    std::to_string(std::max<long long>(0, options_.drain_timeout.count())),
    "--group-ms",
    std::to_string(std::max<long long>(0, options_.group_exit_timeout.count())),
    "--orphan",
    options_.orphans == orphan_policy::kill ? "kill" : "keep",
  };
  if (a->cgroup) {
    args.emplace_back("--cgroup");
    args.push_back(a->cgroup->path());
  }
  args.emplace_back("--");
  for (auto& arg : spec.argv)
    args.push_back(arg);

  child_plan plan;
  set_command(plan, args, env);
  plan.cwd = cwd;
  plan.stdin_fd = devnull_fd_;
  plan.max_fd = max_fd_;

  // One pipe per stream, so each line keeps the stream it came from; one
  // for the shim's report; with orphan_policy::kill, one whose hang-up tells
  // the shim that we are gone.
  auto close_all = [&] {
    for (auto* fd : {&plan.output_fd, &plan.error_fd, &plan.extra_fd,
                     &a->output_fd, &a->error_fd, &a->control_fd})
      close_fd(*fd);
    if (plan.stdin_fd != devnull_fd_)
      close_fd(plan.stdin_fd);
  };
  int report_fd = -1;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return submit(fail("cannot create the output pipe: " + errno_text(errno)));
  a->output_fd = p[0];
  plan.output_fd = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    auto err = errno;
    close_all();
    return submit(fail("cannot create the error pipe: " + errno_text(err)));
  }
  a->error_fd = p[0];
  plan.error_fd = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    auto err = errno;
    close_all();
    return submit(fail("cannot create the shim's pipe: " + errno_text(err)));
  }
  report_fd = p[0];
  plan.extra_fd = p[1];
  if (options_.orphans == orphan_policy::kill) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      auto err = errno;
      close_all();
      close_fd(report_fd);
      return submit(fail("cannot create the shim's pipe: " + errno_text(err)));
    }
    plan.stdin_fd = p[0];
    a->control_fd = p[1];
  }
  if (!raise_fd(plan.output_fd) || !raise_fd(plan.error_fd) ||
      !raise_fd(plan.extra_fd) || !raise_fd(plan.stdin_fd) ||
      ::fcntl(a->output_fd, F_SETFL, O_NONBLOCK) != 0 ||
      ::fcntl(a->error_fd, F_SETFL, O_NONBLOCK) != 0) {
    auto err = errno;
    close_all();
    close_fd(report_fd);
    return submit(fail("cannot prepare descriptors: " + errno_text(err)));
  }
  sigemptyset(&plan.mask);
  child_stack stack{stacks_};
  if (stack.top() == nullptr) {
    auto err = errno;
    close_all();
    close_fd(report_fd);
    return submit(fail("cannot map a stack for the child: " + errno_text(err)));
  }

  a->started = clock_type::now();
  auto spawned = spawn_child(plan, stack.top());
  auto pid = spawned.pid;
  int pidfd = spawned.pidfd;
  auto spawn_err = spawned.err;
  // The shim has exec'd or exited by now (CLONE_VFORK).
  close_fd(plan.output_fd);
  close_fd(plan.error_fd);
  close_fd(plan.extra_fd);
  if (plan.stdin_fd != devnull_fd_)
    close_fd(plan.stdin_fd);
  auto give_up = [&](std::string text) {
    close_fd(report_fd);
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    close_fd(a->control_fd);
    return submit(fail(std::move(text)));
  };
  if (pid < 0)
    return give_up("cannot start a process: clone failed: " +
                   errno_text(spawn_err));
  if (plan.failed_stage != 0) {
    // The shim could not exec and has exited; reap it here.
    close_fd(pidfd);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (plan.failed_stage == stage_exec)
      return give_up("cannot start tasksup-shim (" + shim_path_ +
                     "): " + errno_text(plan.failed_err));
    return give_up("cannot start " + a->argv0 + ": " +
                   stage_text(plan.failed_stage) + ": " +
                   errno_text(plan.failed_err));
  }
  if (pidfd < 0) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return give_up("cannot watch process " + std::to_string(pid) +
                   ": no pidfd");
  }
  // The shim answers once the agent has exec'd (or could not).
  auto agent = read_shim_report(report_fd, options_.shim_report_timeout);
  close_fd(report_fd);
  if (agent == -2) {
    close_fd(a->control_fd);
    stop_unreported_shim(pid, pidfd, a->attempt_dir);
    close_fd(pidfd);
    return give_up(not_reported_text());
  }
  a->pid = pid;
  a->pidfd = pidfd; // close-on-exec already (CLONE_PIDFD)
  a->agent_pid = agent;
  return submit(std::move(a));
}

std::shared_ptr<attempt_handle> reactor::adopt(adopt_spec spec,
                                               attempt_callbacks cb) {
  auto a = std::make_unique<attempt>();
  a->id = next_id_.fetch_add(1);
  a->started = clock_type::now();
  a->cb = std::move(cb);
  a->adopted = true;
  a->argv0 = spec.agent_id;
  auto dir = shim_dir_of(spec.attempt_dir);
  a->attempt_dir = dir;
  a->artifacts_dir = dir + "/artifacts";
  a->log_path = dir + "/output.log";
  auto not_adopted = [&](std::string why) {
    a->never_ran("node restarted and the attempt could not be adopted: " +
                 std::move(why));
    a->pid = -1;
    close_fd(a->pidfd);
    return submit(std::move(a));
  };
  if (!init_error_.empty()) {
    a->spawn_failed = true;
    a->infrastructure_error = init_error_;
    return finish_unposted(std::move(a));
  }
  if (spec.attempt_dir.empty())
    return not_adopted("no attempt directory was given");
  auto cap = output_capture::create({}, line_sink(*a), options_.output_limits);
  if (!cap)
    return not_adopted(cap.error().to_string());
  a->capture.emplace(std::move(*cap));
  // The output so far rebuilds the tail; only later lines are delivered.
  a->log_fd = ::open(a->log_path.c_str(), O_RDONLY | O_CLOEXEC);
  auto index_path = dir + "/" + std::string{stream_index_name};
  a->index_fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  // Not the reactor's buffer: this runs on the caller's thread.
  std::vector<char> buf(64 * 1024);
  a->delivering = false;
  if (a->log_fd >= 0 && a->index_fd >= 0)
    follow_log(*a, buf);

  auto exit_path = dir + "/" + std::string{exit_record_name};
  auto shim_path = dir + "/" + std::string{shim_record_name};
  // Returns true when the attempt's end is recorded (then it is reported).
  auto take_exit = [&]() -> std::optional<std::string> {
    auto text = read_small_file(exit_path);
    if (!text)
      return text.error().path == "missing"
               ? std::optional<std::string>{}
               : std::optional<std::string>{text.error().to_string()};
    auto rec = parse_exit_record(*text, exit_path);
    if (!rec)
      return rec.error().to_string();
    a->record = std::move(*rec);
    return std::string{};
  };
  auto finished = [&] {
    a->exited = true;
    a->ended = clock_type::now();
    // The log is complete: read what the replay left (all of it was
    // written before the adoption, so none of it is delivered).
    if (a->log_fd >= 0 && a->index_fd >= 0)
      follow_log(*a, buf);
    a->eof = true;
    return submit(std::move(a));
  };

  auto shim = read_small_file(shim_path);
  std::optional<shim_record> rec;
  std::string shim_problem;
  if (shim) {
    auto parsed = parse_shim_record(*shim, shim_path);
    if (parsed)
      rec = std::move(*parsed);
    else
      shim_problem = parsed.error().to_string();
  } else {
    shim_problem = shim.error().to_string();
  }
  if (rec && !rec->cgroup.empty()) {
    if (auto cg = recorded_cgroup(rec->cgroup,
                                  cgroup_name_for(spec.task_id, spec.attempt)))
      a->cgroup.emplace(std::move(*cg));
  }

  if (auto bad = take_exit()) {
    if (bad->empty())
      return finished();
    if (rec && is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      // A live shim with a corrupt exit record is not ours to believe.
      int fd = pidfd_open(rec->shim_pid);
      if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir))
        pidfd_signal(fd, SIGKILL);
      if (fd >= 0)
        ::close(fd);
    }
    if (rec)
      kill_group_members(rec->agent_pgid, rec->agent_start, dir);
    if (a->cgroup)
      a->cgroup->kill_all();
    return not_adopted(*bad);
  }
  if (!rec)
    return not_adopted("no usable shim record (" + shim_problem +
                       "), so nothing of it can be found or killed");
  if (!spec.runtime_id.empty() &&
      spec.runtime_id != std::to_string(rec->agent_pid))
    return not_adopted(shim_path + " names agent pid " +
                       std::to_string(rec->agent_pid) + ", not " +
                       spec.runtime_id);
  if (is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
    // The pidfd names the process we checked only if the check still holds
    // once it is open.
    int fd = pidfd_open(rec->shim_pid);
    if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      a->pid = rec->shim_pid;
      a->pidfd = fd;
      a->agent_pid = rec->agent_pid;
      a->delivering = true;
      if (a->log_fd < 0 || a->index_fd < 0)
        warn("process runtime: adopted attempt in " + dir +
             " has no readable output.log or output.streams; its output "
             "from now on is only in its shim's log");
      return submit(std::move(a));
    }
    if (fd >= 0)
      ::close(fd);
  }
  // The shim is gone; it may have recorded the end just now.
  if (auto bad = take_exit(); bad && bad->empty())
    return finished();
  auto killed = kill_group_members(rec->agent_pgid, rec->agent_start, dir);
  if (a->cgroup)
    a->cgroup->kill_all();
  return not_adopted("its shim (pid " + std::to_string(rec->shim_pid) +
                     ") is gone and recorded no exit" +
                     (killed > 0 ? "; killed " + std::to_string(killed) +
                                     " processes left in its group " +
                                     std::to_string(rec->agent_pgid)
                                 : std::string{}));
}

bool reactor::follow_log(attempt& a, std::vector<char>& buffer) {
  if (a.log_fd < 0 || a.index_fd < 0)
    return true;
  char buf[4096];
  for (;;) {
    auto n = ::read(a.index_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    auto segs =
      a.index.feed({buf, static_cast<std::size_t>(n)},
                   a.attempt_dir + "/" + std::string{stream_index_name});
    if (!segs) {
      warn("process runtime: " + segs.error().to_string() +
           "; the rest of the attempt's output is not followed");
      close_fd(a.index_fd);
      a.segments.clear();
      return true;
    }
    a.segments.insert(a.segments.end(), segs->begin(), segs->end());
  }
  while (!a.segments.empty()) {
    auto& seg = a.segments.front();
    if (seg.bytes == 0) {
      a.segments.pop_front();
      continue;
    }
    auto want = static_cast<std::size_t>(
      std::min<std::uint64_t>(seg.bytes, buffer.size()));
    auto n =
      ::pread(a.log_fd, buffer.data(), want, static_cast<off_t>(a.log_offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false; // the log is behind its index: not written yet
    auto got = static_cast<std::size_t>(n);
    a.log_offset += got;
    seg.bytes -= got;
    if (seg.kind != 'n')
      a.capture->feed(seg.kind == 'e' ? output_stream::err : output_stream::out,
                      {buffer.data(), got});
    if (a.delivering && a.capture->full()) {
      set_paused(a, true);
      return false;
    }
  }
  return true;
}

void reactor::read_exit_record(attempt& a) {
  auto path = a.attempt_dir + "/" + std::string{exit_record_name};
  auto text = read_small_file(path);
  std::string problem;
  if (text) {
    auto rec = parse_exit_record(*text, path);
    if (rec) {
      a.record = std::move(*rec);
      return;
    }
    problem = "its exit record is unusable: " + rec.error().to_string();
  } else if (text.error().path == "missing") {
    problem = "it recorded no exit";
  } else {
    problem = "its exit record is unreadable: " + text.error().to_string();
  }
  std::string how;
  if (a.served)
    how = " (its socket hung up)";
  else if (!a.adopted && WIFEXITED(a.wait_status))
    how = " (it exited with status " +
          std::to_string(WEXITSTATUS(a.wait_status)) + ")";
  else if (!a.adopted && WIFSIGNALED(a.wait_status))
    how = " (killed by signal " + std::to_string(WTERMSIG(a.wait_status)) + ")";
  a.infrastructure_error = "tasksup-shim of process " +
                           std::to_string(a.agent_pid) + " ended" + how +
                           " but " + problem;
  // Whatever of the agent's group is left goes with it.
  auto shim_path = a.attempt_dir + "/" + std::string{shim_record_name};
  if (auto s = read_small_file(shim_path))
    if (auto rec = parse_shim_record(*s, shim_path);
        rec && (a.agent_pid <= 0 || rec->agent_pid == a.agent_pid))
      kill_group_members(rec->agent_pgid, rec->agent_start, a.attempt_dir);
  if (a.cgroup)
    a.cgroup->kill_all();
}

std::optional<memory_cgroup> reactor::recorded_cgroup(const std::string& path,
                                                      const std::string& name) {
  // Only a directory this runtime would have made: right below its own
  // parent, and (when known) named for the attempt.
  auto* ctrl = memory_controller();
  if (ctrl == nullptr)
    return std::nullopt;
  auto prefix = ctrl->parent_dir + "/";
  if (path.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  auto base = path.substr(prefix.size());
  if (base.empty() || base.find('/') != std::string::npos || base == "." ||
      base == ".." || (!name.empty() && base != name))
    return std::nullopt;
  return memory_cgroup::existing(path);
}

reap_report reactor::reap(const reap_spec& spec) {
  reap_report report;
  if (spec.attempt_root.empty())
    return report;
  auto root = shim_dir_of(spec.attempt_root);
  std::error_code ec;
  fs::recursive_directory_iterator it{
    root, fs::directory_options::skip_permission_denied, ec};
  if (ec) {
    if (ec != std::errc::no_such_file_or_directory)
      report.errors.push_back(root + ": " + ec.message());
    return report;
  }
  for (; !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    if (it.depth() >= 2) {
      it.disable_recursion_pending();
    }
    if (it->path().filename() != shim_record_name)
      continue;
    std::error_code sec;
    if (it->symlink_status(sec).type() != fs::file_type::regular)
      continue;
    auto dir = it->path().parent_path().string();
    if (fs::exists(dir + "/" + std::string{exit_record_name}, sec))
      continue; // ended; nothing runs
    auto path = it->path().string();
    auto text = read_small_file(path);
    if (!text) {
      report.errors.push_back(text.error().to_string());
      continue;
    }
    auto rec = parse_shim_record(*text, path);
    if (!rec) {
      report.errors.push_back(rec.error().to_string());
      continue;
    }
    if (spec.keep.count(dir) != 0 ||
        spec.keep.count(std::to_string(rec->agent_pid)) != 0)
      continue;
    std::string how;
    if (is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      int fd = pidfd_open(rec->shim_pid);
      if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir) &&
          pidfd_signal(fd, SIGUSR1) == 0)
        how = "asked its shim (pid " + std::to_string(rec->shim_pid) +
              ") to kill process group " + std::to_string(rec->agent_pgid);
      if (fd >= 0)
        ::close(fd);
    }
    auto killed = kill_group_members(rec->agent_pgid, rec->agent_start, dir);
    if (killed > 0)
      how += (how.empty() ? "" : "; ") + std::string{"killed "} +
             std::to_string(killed) + " processes of group " +
             std::to_string(rec->agent_pgid);
    // The cgroup only of an attempt shown to be one.
    if (!how.empty() && !rec->cgroup.empty())
      if (auto cg = recorded_cgroup(rec->cgroup, {}))
        cg->kill_all();
    if (!how.empty())
      report.reaped.push_back(dir + ": " + how);
  }
  return report;
}

void reactor::run() {
  std::vector<epoll_event> events(256);
  for (;;) {
    auto now = clock_type::now();
    int timeout = -1;
    auto until = [&](clock_type::time_point at) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(at - now).count();
      auto t = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
      timeout = timeout < 0 ? t : std::min(timeout, t);
    };
    if (!deadlines_.empty())
      until(deadlines_.top().first);
    if (!stale_cgroups_.empty())
      until(now + std::chrono::milliseconds{50});
    if (idle_check_at_)
      until(*idle_check_at_);
    if (shutdown_deadline_)
      until(*shutdown_deadline_);
    // An attempt queued while this thread sleeps wakes it through its
    // shim's report; should that never come, its deadline is scheduled
    // once this thread looks at the queue, within a quarter of the wait.
    until(now + std::max(options_.shim_report_timeout / 4,
                         std::chrono::milliseconds{1}));
    int n = ::epoll_wait(epoll_fd_, events.data(),
                         static_cast<int>(events.size()), timeout);
    if (n < 0 && errno != EINTR) {
      warn("process runtime: epoll_wait failed: " + errno_text(errno));
      n = 0;
    }
    // The wake-up descriptor is read before the commands are taken, so a
    // command posted after that finds wake_pending_ cleared and writes again.
    for (int i = 0; i < n; ++i) {
      if ((events[static_cast<std::size_t>(i)].data.u64 & 3) == kind_wake) {
        std::uint64_t count;
        [[maybe_unused]] auto r = ::read(wake_fd_, &count, sizeof(count));
      }
    }
    // New attempts are taken before their events are looked at: submit()
    // watches them before it queues them, and wakes nobody.
    handle_commands();
    for (int i = 0; i < n; ++i) {
      auto k = events[static_cast<std::size_t>(i)].data.u64;
      auto kind = k & 3;
      if (kind == kind_wake)
        continue;
      auto it = attempts_.find(k >> 2);
      if (it == attempts_.end()) {
        // A retired serving shim has exited.
        if (auto r = retiring_.find(k >> 2); r != retiring_.end()) {
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, r->second.pidfd, nullptr);
          discard_shim(r->second);
          retiring_.erase(r);
        }
        continue;
      }
      auto& a = *it->second;
      if (a.ending_shim) {
        if (kind == kind_exit)
          unreported_shim_ended(a);
        continue;
      }
      if (kind == kind_exit && !a.exited)
        on_leader_exit(a);
      else if (kind == kind_output && a.output_fd >= 0 && !a.paused)
        read_output(a, output_stream::out);
      else if (kind == kind_error && a.error_fd >= 0 && !a.paused)
        read_output(a, output_stream::err);
    }
    now = clock_type::now();
    while (!deadlines_.empty() && deadlines_.top().first <= now) {
      auto id = deadlines_.top().second;
      deadlines_.pop();
      if (auto it = attempts_.find(id); it != attempts_.end())
        advance(*it->second);
    }
    if (!stale_cgroups_.empty())
      retry_cgroup_removals(false);
    if (idle_check_at_ && now >= *idle_check_at_)
      expire_idle_shims(false);
    bool closing;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      closing = closing_;
      if (closing && attempts_.empty() && commands_.empty()) {
        thread_running_ = false;
        break;
      }
    }
    if (closing && !shutdown_deadline_) {
      expire_idle_shims(true);
      shutdown_deadline_ = clock_type::now() + options_.drain_timeout +
                           options_.group_exit_timeout;
      for (auto& [id, a] : attempts_) {
        // Nobody waits for their lines any more: drain so they can end.
        set_paused(*a, false);
        if (!a->exited)
          signal_group(*a, SIGKILL);
      }
    }
    if (shutdown_deadline_ && clock_type::now() >= *shutdown_deadline_) {
      // Whatever is still unfinished (a process stuck in the kernel) is
      // reported now: the runtime is going away.
      std::vector<std::uint64_t> ids;
      for (auto& [id, a] : attempts_)
        ids.push_back(id);
      for (auto id : ids) {
        auto& a = *attempts_[id];
        if (!a.exited) {
          a.exited = true;
          a.ended = clock_type::now();
          a.infrastructure_error =
            "process runtime shut down before the attempt exited";
        }
        finalize(a);
      }
    }
  }
  // Shims that ran the last attempts: idle, they exit as their sockets
  // hang up; one that has not within a second is killed (it loses nothing).
  expire_idle_shims(true);
  auto give_up_at = clock_type::now() + std::chrono::seconds{1};
  for (auto& [id, s] : retiring_) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up_at -
                                                             clock_type::now())
                  .count();
    pollfd p{s.pidfd, POLLIN, 0};
    while (left > 0 && ::poll(&p, 1, static_cast<int>(left)) < 0 &&
           errno == EINTR) {
    }
    discard_shim(s);
  }
  retiring_.clear();
  retry_cgroup_removals(true);
}

void reactor::handle_commands() {
  std::vector<command> cmds;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    cmds.swap(commands_);
    wake_pending_ = false;
  }
  for (auto& cmd : cmds) {
    if (cmd.kind == command::add) {
      add_attempt(std::move(cmd.item));
      continue;
    }
    auto it = attempts_.find(cmd.id);
    if (it == attempts_.end())
      continue;
    auto& a = *it->second;
    // Whoever kills no longer waits for lines: the pipes are drained again,
    // so the attempt can end.
    if (cmd.kind == command::resume || cmd.kind == command::kill)
      set_paused(a, false);
    if (cmd.kind == command::resume || a.exited)
      continue;
    if (cmd.kind == command::kill) {
      signal_group(a, SIGKILL);
      continue;
    }
    if (cmd.grace.count() <= 0) {
      signal_group(a, SIGKILL);
      continue;
    }
    signal_group(a, SIGTERM);
    // A stopped process only sees SIGTERM once continued.
    signal_group(a, SIGCONT);
    auto at = clock_type::now() + cmd.grace;
    if (!a.kill_at || at < *a.kill_at) {
      a.kill_at = at;
      schedule(at, a.id);
    }
  }
}

void reactor::add_attempt(attempt_ptr item) {
  // Its descriptors are already watched (submit()).
  auto& a = *item;
  attempts_.emplace(a.id, std::move(item));
  if (a.spawn_failed || (a.adopted && a.exited)) {
    finalize(a);
    return;
  }
  // An adopted attempt's output is read from its log as it grows.
  if (a.adopted) {
    a.drain_until = clock_type::now();
    advance(a);
  }
  if (a.report_pending)
    schedule(a.report_due, a.id);
}

bool reactor::take_end(attempt& a) {
  for (;;) {
    auto end = parse_attempt_end(a.end_bytes);
    if (!end) {
      // Not a shim of ours any more: it serves nothing else.
      warn("process runtime: " + end.error().to_string());
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

void reactor::signal_group(attempt& a, int sig) {
  if (a.ending_shim)
    return; // being ended, the agent it started with it
  if (a.report_pending) {
    // A shim drops the signals that reach it before it read its request;
    // they are sent once it reported the start. A kill stands for a stop.
    if (sig == SIGKILL || (sig == SIGTERM && a.deferred_signal == 0))
      a.deferred_signal = sig;
    return;
  }
  // The shim signals the agent's group: SIGTERM stops (with SIGCONT),
  // SIGUSR1 kills. Through the pidfd, so a shim that has gone and whose pid
  // was reused is never hit; once the shim has exited it has killed the
  // group already.
  if (!a.exited && a.pidfd >= 0 && (sig == SIGTERM || sig == SIGKILL))
    pidfd_signal(a.pidfd, sig == SIGKILL ? SIGUSR1 : SIGTERM);
  if (sig == SIGKILL && a.cgroup)
    a.cgroup->kill_all();
}

void reactor::on_leader_exit(attempt& a) {
  auto now = clock_type::now();
  if (a.served) {
    if (take_report(a) != report_state::taken)
      return; // to come, or failed (then reported: `a` is gone)
    // The shim says `end` with the exit record once the attempt is over
    // (the record written, the agent's group gone, its output forwarded);
    // a hang-up means it died, and what it recorded is read from the file.
    if (!take_end(a))
      return;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.control_fd, nullptr);
    a.group_empty = true;
  } else if (!a.adopted) {
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(a.pid, &status, WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == 0)
      return; // not yet reapable; the pidfd stays readable
    if (r > 0)
      a.wait_status = status;
  }
  a.exited = true;
  a.ended = now;
  if (!a.record)
    read_exit_record(a);
  if (!a.served) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
    close_fd(a.pidfd);
    close_fd(a.control_fd);
  }
  if (a.adopted) {
    a.drain_until = now + options_.drain_timeout;
    if (!a.paused && follow_log(a, read_buf_))
      a.eof = true;
  }
  // Nothing the agent started outlives it; what they wrote stays readable
  // in the pipe.
  signal_group(a, SIGKILL);
  a.kill_at.reset();
  a.drain_until = now + options_.drain_timeout;
  a.group_until = now + options_.group_exit_timeout;
  auto id = a.id;
  advance(a); // may report the attempt and destroy it
  // Deadlines only for an attempt still waiting (for its output to end or
  // its group to go): a stale one would wake the reactor for nothing.
  if (attempts_.count(id) != 0) {
    schedule(now + options_.drain_timeout, id);
    schedule(now + options_.group_exit_timeout, id);
  }
}

void reactor::read_output(attempt& a, output_stream stream) {
  // The shim reports the agent's start before it forwards any output, so
  // the report is there to take before the first line.
  if (take_report(a) == report_state::failed || a.ending_shim)
    return; // reported (`a` is gone), or its shim is being ended
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
        return;
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    // EOF (or a broken pipe, which means the same here).
    close_stream(fd);
    if (a.output_fd < 0 && a.error_fd < 0) {
      a.eof = true;
      advance(a);
    }
    return;
  }
}

void reactor::set_paused(attempt& a, bool paused) {
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
    a.drain_until =
      clock_type::now() +
      (a.exited ? options_.drain_timeout : std::chrono::milliseconds{0});
    schedule(clock_type::now(), a.id);
    return;
  }
  // The drain after the agent's exit waits for the receiver, not against it.
  if (!paused && a.exited && !a.eof) {
    auto at = clock_type::now() + options_.drain_timeout;
    a.drain_until = at;
    schedule(at, a.id);
  }
}

bool reactor::drain_after_end(attempt& a) {
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

void reactor::close_stream(int& fd) {
  if (fd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close_fd(fd);
  }
}

void reactor::close_output(attempt& a) {
  close_stream(a.output_fd);
  close_stream(a.error_fd);
  a.eof = true;
}

bool reactor::group_gone(attempt& a) {
  // The shim waited for the agent's group to vanish before it exited; the
  // shim's own group held only the shim.
  if (a.pid <= 0 || a.adopted)
    a.group_empty = true;
  if (a.pid <= 0 && !a.cgroup)
    return true;
  // Members orphaned by the agent are our children (subreaper): reap them.
  if (!a.group_empty)
    while (::waitpid(-a.pid, nullptr, WNOHANG) > 0) {
    }
  bool gone = true;
  if (a.cgroup) {
    a.cgroup->kill_all();
    for (auto pid : a.cgroup->pids()) {
      ::waitpid(pid, nullptr, WNOHANG);
      gone = false;
    }
  }
  if (!a.group_empty) {
    if (::kill(-a.pid, 0) == 0 || errno == EPERM) {
      // Without a subreaper, killed members may stay zombies of an init
      // that does not reap; they run no code, so do not wait for them.
      if (subreaper_) {
        ::kill(-a.pid, SIGKILL);
        gone = false;
      }
    } else if (errno == ESRCH) {
      a.group_empty = true;
    }
  }
  return gone;
}

void reactor::advance(attempt& a) {
  auto now = clock_type::now();
  if (a.ending_shim) {
    // Its grace is over: killed; its pidfd says when it is gone.
    if (a.kill_at && now >= *a.kill_at) {
      a.kill_at.reset();
      pidfd_signal(a.pidfd, SIGKILL);
    }
    return;
  }
  if (a.report_pending) {
    // Nothing is done for it before the report (signals wait for it).
    if (now < a.report_due)
      return;
    auto report = take_report(a);
    if (report == report_state::failed)
      return; // reported: `a` is gone
    if (report == report_state::pending) {
      // A fresh shim asked meanwhile has its own time.
      if (clock_type::now() < a.report_due)
        return;
      report_failed(a, not_reported_text());
      return; // reported (`a` is gone), or its shim is being ended
    }
  }
  if (!a.exited) {
    if (a.adopted && !a.paused && a.drain_until && now >= *a.drain_until) {
      // drain_until is the next look at an adopted attempt's log.
      follow_log(a, read_buf_);
      a.drain_until = now + follow_interval;
      schedule(*a.drain_until, a.id);
    }
    if (a.kill_at && now >= *a.kill_at) {
      a.kill_at.reset();
      signal_group(a, SIGKILL);
    }
    return;
  }
  if (!a.eof) {
    if (a.paused)
      return; // set_paused(false) starts the drain again
    if (a.served && a.shim_ok) {
      if (!drain_after_end(a))
        return; // paused
    } else if (a.adopted && follow_log(a, read_buf_)) {
      a.eof = true;
    } else if (a.adopted) {
      if (!a.paused) {
        // The log is behind its index (cannot be, once the shim exited,
        // unless the file was cut): look again shortly, not forever.
        if (a.drain_until && now >= *a.drain_until) {
          warn("process runtime: " + a.log_path +
               " is shorter than output.streams says; stopped reading");
          a.eof = true;
        } else {
          schedule(now + poll_interval, a.id);
          return;
        }
      } else {
        return;
      }
    } else if (a.drain_until && now >= *a.drain_until) {
      warn("process runtime: output of process " + std::to_string(a.pid) +
           " still open " + std::to_string(options_.drain_timeout.count()) +
           " ms after it exited (held by a process outside its group); "
           "stopped reading");
      close_output(a);
    } else {
      return;
    }
  }
  if (!group_gone(a)) {
    if (a.group_until && now < *a.group_until) {
      schedule(now + poll_interval, a.id);
      return;
    }
    warn("process runtime: processes of group " + std::to_string(a.pid) +
         " survived SIGKILL for " +
         std::to_string(options_.group_exit_timeout.count()) +
         " ms; reporting the attempt anyway");
  }
  finalize(a);
}

void reactor::finalize(attempt& a) {
  // An attempt whose pid never came still announces first (no id).
  announce(a, {});
  attempt_outcome out;
  // A missing or unexecutable agent reports 127/126 as a shell would; only
  // a failure of the runtime itself means nothing ran. An adopted attempt
  // has run, whatever became of it.
  out.started = !(a.spawn_failed && !a.infrastructure_error.empty());
  out.duration_s = std::chrono::duration<double>(a.ended - a.started).count();
  if (a.spawn_failed) {
    out.exit_code = a.preset_exit_code;
    if (!a.failure_line.empty() && a.capture)
      a.capture->feed(a.failure_line + "\n");
    out.started = out.started || a.adopted;
  } else if (a.record) {
    out.exit_code = a.record->exit_code;
    out.signal = a.record->signal;
    out.started = a.record->started;
    if (!a.record->started)
      a.infrastructure_error = a.record->error;
    for (auto& w : a.record->warnings)
      warn("process runtime: " + w);
    if (a.capture)
      a.capture->add_not_logged(a.record->bytes_not_logged);
    if (a.adopted || a.record->duration_us > 0)
      out.duration_s = static_cast<double>(a.record->duration_us) / 1e6;
  }
  out.infrastructure_error = a.infrastructure_error;
  if (!out.infrastructure_error.empty() && out.exit_code == 0)
    out.exit_code = 1;
  if (a.capture) {
    a.capture->finish();
    if (auto text = a.capture->summary(); !text.empty() && a.cb.on_notice) {
      try {
        a.cb.on_notice(text);
      } catch (...) {
        warn("process runtime: an on_notice callback threw");
      }
    }
    out.tail = a.capture->tail();
    out.log_path = a.log_path;
    if (!a.capture->log_error().empty())
      warn("process runtime: " + a.capture->log_error());
  }
  if (a.cgroup) {
    out.oom_killed = a.cgroup->oom_killed();
    if (!a.cgroup->remove())
      stale_cgroups_.emplace_back(std::move(*a.cgroup),
                                  clock_type::now() + std::chrono::seconds{10});
    a.cgroup.reset();
  }
  if (!a.artifacts_dir.empty() && !empty_dir(a.artifacts_dir)) {
    std::error_code ec;
    fs::recursive_directory_iterator it{
      a.artifacts_dir, fs::directory_options::skip_permission_denied, ec};
    for (; !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
      if (it->symlink_status(ec).type() != fs::file_type::regular)
        continue;
      if (out.artifacts.size() == max_artifacts) {
        warn("process runtime: more than " + std::to_string(max_artifacts) +
             " artifacts in " + a.artifacts_dir + "; reporting the first");
        break;
      }
      out.artifacts.push_back(it->path().string());
    }
    std::sort(out.artifacts.begin(), out.artifacts.end());
  }
  if (a.served) {
    release_shim(a);
  } else if (a.pidfd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
  }
  close_fd(a.pidfd);
  close_fd(a.control_fd);
  close_output(a);
  if (auto handle = a.handle.lock())
    handle->mark_ended();
  auto node = attempts_.extract(a.id);
  // Removed before the callback, so a stop() it triggers is a no-op.
  deliver_sync(node.mapped()->cb, std::move(out));
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
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.sock, nullptr);
  bool closing;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closing = closing_;
  }
  if (a.shim_ok && !closing) {
    std::unique_lock<std::mutex> guard{shims_mtx_};
    // Two attempts of one task at once had two shims: one is enough.
    if (idle_shims_.emplace(s.dir, s).second) {
      guard.unlock();
      auto at = s.idle_since + options_.shim_idle_timeout;
      if (!idle_check_at_ || at < *idle_check_at_)
        idle_check_at_ = at;
      return;
    }
  }
  if (!a.shim_ok && !a.exited)
    // Still running the agent (the runtime is closing): it goes with it.
    pidfd_signal(s.pidfd, SIGUSR1);
  retire_shim(std::move(s));
}

void reactor::retire_shim(served_shim s) {
  // An idle shim exits when its socket hangs up; its pidfd says when.
  close_fd(s.sock);
  auto id = next_id_.fetch_add(1);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(id, kind_exit);
  if (s.pidfd < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s.pidfd, &ev) != 0) {
    discard_shim(s);
    return;
  }
  retiring_.emplace(id, std::move(s));
}

void reactor::expire_idle_shims(bool all) {
  auto now = clock_type::now();
  std::vector<served_shim> expired;
  std::optional<clock_type::time_point> next;
  {
    std::lock_guard<std::mutex> guard{shims_mtx_};
    for (auto it = idle_shims_.begin(); it != idle_shims_.end();) {
      auto at = it->second.idle_since + options_.shim_idle_timeout;
      if (all || at <= now) {
        expired.push_back(std::move(it->second));
        it = idle_shims_.erase(it);
        continue;
      }
      if (!next || at < *next)
        next = at;
      ++it;
    }
  }
  idle_check_at_ = next;
  for (auto& s : expired)
    retire_shim(std::move(s));
}

void reactor::retry_cgroup_removals(bool final_pass) {
  auto now = clock_type::now();
  auto& v = stale_cgroups_;
  for (auto it = v.begin(); it != v.end();) {
    it->first.kill_all();
    for (auto pid : it->first.pids())
      ::waitpid(pid, nullptr, WNOHANG);
    if (it->first.remove()) {
      it = v.erase(it);
    } else if (final_pass || now >= it->second) {
      warn("process runtime: cannot remove cgroup " + it->first.path() + ": " +
           errno_text(errno));
      it = v.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace tasksup::runtime::detail

#include "shim_pool.hpp"

#include "attempt.hpp"
#include "attempt_io.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::runtime::detail {

// ---- the shim protocol's ends -------------------------------------------

void discard_shim(served_shim& s) {
  close_fd(s.sock);
  if (s.pidfd >= 0)
    pidfd_signal(s.pidfd, SIGKILL);
  close_fd(s.pidfd);
  if (s.pid > 0)
    while (::waitpid(s.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  s.pid = -1;
}

void kill_recorded_agent(pid_t pid, const std::string& attempt_dir) {
  auto path = attempt_dir + "/" + std::string{shim_record_name};
  if (auto text = read_small_file(path))
    if (auto rec = parse_shim_record(*text, path); rec && rec->shim_pid == pid)
      kill_group_members(rec->agent_pgid, rec->agent_start, attempt_dir);
}

void stop_unreported_shim(pid_t pid, int pidfd,
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

pid_t report_pid(std::string_view digits) {
  long pid = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || pid >= 1 << 23)
      return -1;
    pid = pid * 10 + (c - '0');
  }
  return digits.empty() ? -1 : static_cast<pid_t>(pid);
}

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

// ---- the program ----------------------------------------------------------

std::string shim_launcher::init(const process_runtime_options& options,
                                warning_sink& warn) {
  raise_fd_limit(warn);
  std::string looked;
  path_ = find_shim(options.shim_path, looked);
  if (path_.empty())
    return "process runtime: cannot find the tasksup-shim program "
           "(looked at " +
           looked +
           "); set process_runtime_options::shim_path or "
           "TASKSUP_SHIM";
  for (auto& name : options.inherited_env)
    if (auto* value = std::getenv(name.c_str()))
      base_env_.emplace(name, value);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "LC_", 3) == 0)
      if (auto* eq = std::strchr(*e, '='))
        base_env_.emplace(std::string(*e, eq), std::string(eq + 1));
  devnull_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_fd_ < 0 || !raise_fd(devnull_fd_))
    return "process runtime: cannot set up its reactor: " + errno_text(errno);
  return {};
}

void shim_launcher::raise_fd_limit(warning_sink& warn) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0)
    return;
  if (lim.rlim_cur < lim.rlim_max) {
    auto wanted = lim;
    wanted.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &wanted) == 0)
      lim = wanted;
    else
      warn("process runtime: cannot raise the open file limit to " +
           std::to_string(lim.rlim_max) + ": " + errno_text(errno));
  }
  max_fd_ = lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > 1 << 20
              ? 1 << 20
              : static_cast<int>(lim.rlim_cur);
}

// ---- the pool -------------------------------------------------------------

std::optional<served_shim> shim_pool::spawn(const std::string& dir,
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
    program_.path(), "--serve", dir, "--orphan",
    options_.orphans == orphan_policy::kill ? "kill" : "keep"};
  child_plan plan;
  set_command(plan, args, program_.base_env());
  plan.cwd = "/";
  // Stdin is the socket; a shim that cannot go on says why on our stderr
  // (when we have one).
  plan.stdin_fd = theirs;
  plan.output_fd = program_.devnull();
  plan.error_fd = ::fcntl(2, F_GETFD) >= 0 ? 2 : program_.devnull();
  plan.max_fd = program_.max_fd();
  sigemptyset(&plan.mask);
  if (!raise_fd(plan.stdin_fd)) {
    error = "cannot prepare descriptors: " + errno_text(errno);
    close_fd(theirs);
    close_fd(s.sock);
    return std::nullopt;
  }
  child_stack stack{program_.stacks()};
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
              ? "cannot start tasksup-shim (" + program_.path() +
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

std::optional<served_shim> shim_pool::take_idle(const std::string& dir) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto it = idle_.find(dir);
  if (it == idle_.end())
    return std::nullopt;
  auto s = std::move(it->second);
  idle_.erase(it);
  return s;
}

void shim_pool::release(served_shim s, bool reusable) {
  if (reusable) {
    std::unique_lock<std::mutex> guard{mtx_};
    // Two attempts of one task at once had two shims: one is enough.
    if (idle_.emplace(s.dir, s).second) {
      guard.unlock();
      auto at = s.idle_since + options_.shim_idle_timeout;
      if (!idle_check_at_ || at < *idle_check_at_)
        idle_check_at_ = at;
      return;
    }
  }
  retire(std::move(s));
}

void shim_pool::retire(served_shim s) {
  // An idle shim exits when its socket hangs up; its pidfd says when.
  close_fd(s.sock);
  auto id = ids_.fetch_add(1);
  if (s.pidfd < 0 || !io_.watch_exit(id, s.pidfd)) {
    discard_shim(s);
    return;
  }
  retiring_.emplace(id, std::move(s));
}

bool shim_pool::retired_exited(std::uint64_t id) {
  auto r = retiring_.find(id);
  if (r == retiring_.end())
    return false;
  io_.unwatch(r->second.pidfd);
  discard_shim(r->second);
  retiring_.erase(r);
  return true;
}

void shim_pool::expire_idle(bool all) {
  auto now = clock_type::now();
  std::vector<served_shim> expired;
  std::optional<clock_type::time_point> next;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto at = it->second.idle_since + options_.shim_idle_timeout;
      if (all || at <= now) {
        expired.push_back(std::move(it->second));
        it = idle_.erase(it);
        continue;
      }
      if (!next || at < *next)
        next = at;
      ++it;
    }
  }
  idle_check_at_ = next;
  for (auto& s : expired)
    retire(std::move(s));
}

void shim_pool::close() {
  // Shims that ran the last attempts: idle, they exit as their sockets
  // hang up; one that has not within a second is killed (it loses nothing).
  expire_idle(true);
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
}

} // namespace tasksup::runtime::detail

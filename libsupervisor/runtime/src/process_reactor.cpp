#include "process_reactor.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::runtime::detail {

namespace {

namespace fs = std::filesystem;

// alone, bounded length.
std::string cgroup_name_for(const attempt_spec& spec) {
  std::string name;
  for (char c : spec.task_id.substr(0, 200))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'
              ? c
              : '_';
  if (name.empty())
    name = "task";
  return name + "-" + std::to_string(spec.attempt);
}

} // namespace

std::shared_ptr<attempt_handle> reactor::finish_unposted(attempt_ptr item) {
  // The runtime is shutting down: no reactor will report this attempt.
  attempt_outcome out;
  out.exit_code = 1;
  out.infrastructure_error = "process runtime is shutting down";
  if (item->pid > 0) {
    ::kill(-item->pid, SIGKILL);
    ::waitpid(item->pid, nullptr, 0);
  }
  deliver_sync(item->cb, std::move(out));
  return std::make_shared<process_handle>(weak_from_this(), item->id,
                                          std::string{});
}

int reactor::watch(attempt& a) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key(a.id, kind_exit);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.pidfd, &ev) != 0)
    return errno;
  ev.data.u64 = key(a.id, kind_output);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.output_fd, &ev) != 0) {
    auto err = errno;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
    return err;
  }
  ev.data.u64 = key(a.id, kind_error);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, a.error_fd, &ev) != 0) {
    auto err = errno;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.output_fd, nullptr);
    return err;
  }
  return 0;
}

void reactor::abandon(attempt& a, std::string error) {
  signal_group(a, SIGKILL);
  while (::waitpid(a.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  a.pid = -1;
  close_fd(a.pidfd);
  close_fd(a.output_fd);
  close_fd(a.error_fd);
  a.spawn_failed = true;
  a.preset_exit_code = 1;
  a.infrastructure_error = std::move(error);
  a.ended = clock_type::now();
}

std::shared_ptr<attempt_handle> reactor::submit(attempt_ptr item) {
  auto id = item->id;
  auto pid = item->pid;
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
    // for it; an attempt that never ran needs one.
    if (pid > 0) {
      if (auto err = watch(*item); err != 0) {
        guard.unlock();
        abandon(*item, "cannot watch process " + std::to_string(pid) + ": " +
                         errno_text(err));
        return submit(std::move(item));
      }
    } else {
      wake_needed = !std::exchange(wake_pending_, true);
    }
    handle = std::make_shared<process_handle>(
      weak_from_this(), id, pid > 0 ? std::to_string(pid) : std::string{});
    item->handle = handle;
    commands_.push_back(command{command::add, id, {}, std::move(item)});
  }
  if (wake_needed)
    wake();
  return handle;
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
    a->spawn_failed = true;
    a->preset_exit_code = 1;
    a->infrastructure_error = std::move(text);
    a->ended = clock_type::now();
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

  // Directories: the attempt's own, a fresh workspace and artifacts dir.
  if (::mkdir(spec.attempt_dir.c_str(), 0777) != 0) {
    std::error_code ec;
    fs::create_directories(spec.attempt_dir, ec);
    if (ec)
      return submit(
        fail("cannot create " + spec.attempt_dir + ": " + ec.message()));
  }
  a->artifacts_dir = spec.attempt_dir + "/artifacts";
  if (auto err = fresh_dir(a->artifacts_dir); !err.empty())
    return submit(fail(err));
  auto cwd = spec.workdir;
  if (cwd.empty()) {
    cwd = spec.attempt_dir + "/workspace";
    if (auto err = fresh_dir(cwd); !err.empty())
      return submit(fail(err));
  }

  // Output capture; lines go to the callback on the reactor thread.
  auto* self = this;
  auto on_line = a->cb.on_line;
  auto cap = output_capture::create(
    spec.attempt_dir + "/output.log",
    [self, on_line](output_stream stream, std::string_view line) {
      if (!on_line)
        return true;
      try {
        return on_line(stream, line);
      } catch (...) {
        self->warn("process runtime: an on_line callback threw");
        return true;
      }
    },
    options_.output_limits);
  if (!cap)
    return submit(fail(cap.error().to_string()));
  a->capture.emplace(std::move(*cap));

  // Memory limit: a cgroup the child joins before exec.
  if (spec.memory_limit_mb && *spec.memory_limit_mb > 0) {
    if (auto* ctrl = memory_controller()) {
      auto cg = detail::memory_cgroup::create(
        *ctrl, cgroup_name_for(spec), *spec.memory_limit_mb * 1024 * 1024);
      if (cg)
        a->cgroup.emplace(std::move(*cg));
      else
        warn("process runtime: task " + spec.task_id + " attempt " +
             std::to_string(spec.attempt) +
             " runs without its memory limit: " + cg.error().to_string());
    }
  }

  // Environment: the inherited minimum, the spec's, then ours.
  auto env = base_env_;
  for (auto& [k, v] : spec.env)
    env[k] = v;
  env["TASKSUP_TASK_ID"] = spec.task_id;
  env["TASKSUP_ATTEMPT"] = std::to_string(spec.attempt);
  env["TASKSUP_ARTIFACTS_DIR"] = a->artifacts_dir;
  if (!spec.config_dir.empty())
    env["TASKSUP_AGENT_CONFIG_DIR"] = spec.config_dir;

  child_plan plan;
  for (auto& arg : spec.argv)
    plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  for (auto& [k, v] : env)
    plan.env_strings.push_back(k + "=" + v);
  for (auto& s : plan.env_strings)
    plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  auto path_it = env.find("PATH");
  plan.candidates = exec_candidates(
    spec.argv.front(),
    path_it != env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin");
  plan.cwd = cwd;
  plan.stdin_fd = devnull_fd_;
  plan.max_fd = max_fd_;
  plan.cgroup_fd = a->cgroup ? a->cgroup->procs_fd() : -1;

  // One pipe per stream, so each line keeps the stream it came from.
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return submit(fail("cannot create the output pipe: " + errno_text(errno)));
  a->output_fd = out_pipe[0];
  plan.output_fd = out_pipe[1];
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    auto err = errno;
    close_fd(plan.output_fd);
    close_fd(a->output_fd);
    return submit(fail("cannot create the error pipe: " + errno_text(err)));
  }
  a->error_fd = err_pipe[0];
  plan.error_fd = err_pipe[1];
  if (!raise_fd(plan.output_fd) || !raise_fd(plan.error_fd) ||
      (plan.cgroup_fd >= 0 && plan.cgroup_fd < 3) ||
      ::fcntl(a->output_fd, F_SETFL, O_NONBLOCK) != 0 ||
      ::fcntl(a->error_fd, F_SETFL, O_NONBLOCK) != 0) {
    auto err = errno;
    close_fd(plan.output_fd);
    close_fd(plan.error_fd);
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    return submit(fail("cannot prepare descriptors: " + errno_text(err)));
  }
  sigemptyset(&plan.mask);
  child_stack stack{stacks_};
  if (stack.top() == nullptr) {
    auto err = errno;
    close_fd(plan.output_fd);
    close_fd(plan.error_fd);
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    return submit(fail("cannot map a stack for the child: " + errno_text(err)));
  }

  a->started = clock_type::now();
  auto spawned = spawn_child(plan, stack.top());
  auto pid = spawned.pid;
  int pidfd = spawned.pidfd;
  auto spawn_err = spawned.err;
  // The child has exec'd or exited by now (CLONE_VFORK).
  close_fd(plan.output_fd);
  close_fd(plan.error_fd);
  if (a->cgroup)
    a->cgroup->close_procs_fd();
  if (pid < 0) {
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    return submit(
      fail("cannot start a process: clone failed: " + errno_text(spawn_err)));
  }

  if (plan.failed_stage != 0) {
    // The child could not exec and has exited; reap it here.
    close_fd(pidfd);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    auto stage = plan.failed_stage;
    auto err = plan.failed_err;
    if (stage == stage_exec && (err == ENOENT || err == ENOTDIR ||
                                err == ELOOP || err == ENAMETOOLONG)) {
      a->spawn_failed = true;
      a->ended = clock_type::now();
      a->preset_exit_code = 127;
      a->failure_line = "tasksup: " + a->argv0 + ": command not found";
      return submit(std::move(a));
    }
    if (stage == stage_exec &&
        (err == EACCES || err == EPERM || err == ENOEXEC || err == EISDIR)) {
      // Worded so that the classifier sees an agent failure (126), not the
      // "permission denied" of a fatal authentication error.
      a->spawn_failed = true;
      a->ended = clock_type::now();
      a->preset_exit_code = 126;
      a->failure_line =
        "tasksup: " + a->argv0 + ": " +
        (err == ENOEXEC ? "not an executable format" : "not executable");
      return submit(std::move(a));
    }
    return submit(fail("cannot start " + a->argv0 + ": " + stage_text(stage) +
                       ": " + errno_text(err)));
  }

  a->pid = pid;
  a->pidfd = pidfd; // close-on-exec already (CLONE_PIDFD)
  if (a->pidfd < 0) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    a->pid = -1;
    close_fd(a->output_fd);
    close_fd(a->error_fd);
    return submit(
      fail("cannot watch process " + std::to_string(pid) + ": no pidfd"));
  }
  return submit(std::move(a));
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
    if (shutdown_deadline_)
      until(*shutdown_deadline_);
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
      if (it == attempts_.end())
        continue;
      auto& a = *it->second;
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
  if (a.spawn_failed)
    finalize(a);
}

void reactor::signal_group(attempt& a, int sig) {
  // Once the leader is reaped, an empty group stays empty: nobody can join a
  // group that has no member.
  if (a.pid > 0 && !a.group_empty && ::kill(-a.pid, sig) != 0 &&
      errno == ESRCH && a.exited)
    a.group_empty = true;
  if (sig == SIGKILL && a.cgroup)
    a.cgroup->kill_all();
}

void reactor::on_leader_exit(attempt& a) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(a.pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0)
    return; // not yet reapable; the pidfd stays readable
  auto now = clock_type::now();
  a.exited = true;
  a.ended = now;
  if (r > 0)
    a.wait_status = status;
  else
    a.infrastructure_error = "exit status of process " + std::to_string(a.pid) +
                             " was lost: " + errno_text(errno);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
  close_fd(a.pidfd);
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
  // The drain after the agent's exit waits for the receiver, not against it.
  if (!paused && a.exited && !a.eof) {
    auto at = clock_type::now() + options_.drain_timeout;
    a.drain_until = at;
    schedule(at, a.id);
  }
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
  if (a.pid <= 0)
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
  if (!a.exited) {
    if (a.kill_at && now >= *a.kill_at) {
      a.kill_at.reset();
      signal_group(a, SIGKILL);
    }
    return;
  }
  if (!a.eof) {
    if (a.paused)
      return; // set_paused(false) starts the drain again
    if (a.drain_until && now >= *a.drain_until) {
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
  attempt_outcome out;
  if (a.spawn_failed) {
    out.exit_code = a.preset_exit_code;
    if (!a.failure_line.empty() && a.capture)
      a.capture->feed(a.failure_line + "\n");
  } else if (WIFEXITED(a.wait_status)) {
    out.exit_code = WEXITSTATUS(a.wait_status);
  } else if (WIFSIGNALED(a.wait_status)) {
    out.signal = WTERMSIG(a.wait_status);
    out.exit_code = 128 + out.signal;
  }
  out.infrastructure_error = a.infrastructure_error;
  // A missing or unexecutable agent reports 127/126 as a shell would; only
  // a failure of the runtime itself means nothing ran.
  out.started = !(a.spawn_failed && !a.infrastructure_error.empty());
  if (!out.infrastructure_error.empty() && out.exit_code == 0)
    out.exit_code = 1;
  out.duration_s = std::chrono::duration<double>(a.ended - a.started).count();
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
    out.log_path = a.capture->log_path();
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
  if (a.pidfd >= 0)
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.pidfd, nullptr);
  close_fd(a.pidfd);
  close_output(a);
  if (auto handle = a.handle.lock())
    handle->mark_ended();
  auto node = attempts_.extract(a.id);
  // Removed before the callback, so a stop() it triggers is a no-op.
  deliver_sync(node.mapped()->cb, std::move(out));
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

#include "process_reactor.hpp"

#include <cerrno>
#include <csignal>

#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

reactor::reactor(process_runtime_options options)
  : options_(std::move(options)), warn_(options_.on_warning),
    reaper_(options_.cgroup_name, warn_), io_(options_.drain_timeout, warn_),
    pool_(options_, program_, io_, next_id_),
    launcher_(options_, program_, reaper_, warn_) {
  // The report is waited for, however short the wait: a zero timeout
  // would mean none at all on the shim's socket.
  options_.shim_report_timeout =
    std::max(options_.shim_report_timeout, std::chrono::milliseconds{1});
}

void reactor::init() {
  init_error_ = program_.init(options_, warn_);
  if (!init_error_.empty())
    return;
  if (options_.child_subreaper)
    reaper_.become_subreaper();
  init_error_ = io_.open();
  if (!init_error_.empty())
    return;
  thread_running_ = true;
  thread_ = std::thread{[self = shared_from_this()] { self->run(); }};
}

void reactor::shutdown() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    closing_ = true;
  }
  io_.wake();
  if (!thread_.joinable())
    return;
  if (thread_.get_id() == std::this_thread::get_id())
    thread_.detach();
  else
    thread_.join();
}

bool reactor::post(command cmd) {
  bool wake_needed = false;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (closing_ || !thread_running_)
      return false;
    commands_.push_back(std::move(cmd));
    wake_needed = !std::exchange(wake_pending_, true);
  }
  if (wake_needed)
    io_.wake();
  return true;
}

void reactor::deliver_sync(attempt_callbacks& cb, attempt_outcome out) {
  if (cb.on_exit) {
    try {
      cb.on_exit(std::move(out));
    } catch (...) {
      warn_("process runtime: an on_exit callback threw");
    }
  }
}

std::shared_ptr<attempt_handle> reactor::start(attempt_spec spec,
                                               attempt_callbacks cb) {
  auto a = std::make_unique<attempt>();
  a->id = next_id_.fetch_add(1);
  a->cb = std::move(cb);
  // Every path out of here hands the attempt to the reactor, which reports
  // it exactly once (or reports it here when the reactor is gone).
  if (!init_error_.empty()) {
    a->started = clock_type::now();
    a->never_ran(init_error_);
    return finish_unposted(std::move(a));
  }
  auto request = launcher_.launch(*a, std::move(spec), line_sink(*a));
  if (request)
    return start_served(std::move(a), std::move(*request));
  return submit(std::move(a));
}

std::shared_ptr<attempt_handle> reactor::adopt(adopt_spec spec,
                                               attempt_callbacks cb) {
  auto a = std::make_unique<attempt>();
  a->id = next_id_.fetch_add(1);
  a->started = clock_type::now();
  a->cb = std::move(cb);
  if (!init_error_.empty()) {
    a->adopted = true;
    a->argv0 = spec.agent_id;
    a->spawn_failed = true;
    a->infrastructure_error = init_error_;
    return finish_unposted(std::move(a));
  }
  adopt_attempt(*a, spec, line_sink(*a), options_.output_limits, reaper_,
                warn_);
  return submit(std::move(a));
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
      if (auto err = io_.watch(*item); err != 0) {
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
    io_.wake();
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
      self->warn_("process runtime: an on_line callback threw");
      return true;
    }
  };
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
    if (auto at = io_.next_deadline())
      until(*at);
    if (reaper_.has_stale())
      until(now + std::chrono::milliseconds{50});
    if (auto at = pool_.next_check())
      until(*at);
    if (shutdown_deadline_)
      until(*shutdown_deadline_);
    // An attempt queued while this thread sleeps wakes it through its
    // shim's report; should that never come, its deadline is scheduled
    // once this thread looks at the queue, within a quarter of the wait.
    until(now + std::max(options_.shim_report_timeout / 4,
                         std::chrono::milliseconds{1}));
    // The wake-up descriptor is read before the commands are taken, so a
    // command posted after that finds wake_pending_ cleared and writes again.
    int n = io_.wait(events, timeout);
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
        pool_.retired_exited(k >> 2);
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
    while (auto id = io_.take_due(now)) {
      if (auto it = attempts_.find(*id); it != attempts_.end())
        advance(*it->second);
    }
    if (reaper_.has_stale())
      reaper_.retry_removals(false);
    if (auto at = pool_.next_check(); at && now >= *at)
      pool_.expire_idle(false);
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
      pool_.expire_idle(true);
      shutdown_deadline_ = clock_type::now() + options_.drain_timeout +
                           options_.group_exit_timeout;
      for (auto& [id, a] : attempts_) {
        // Nobody waits for their lines any more: drain so they can end.
        io_.set_paused(*a, false);
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
  pool_.close();
  reaper_.retry_removals(true);
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
      io_.set_paused(a, false);
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
      io_.schedule(at, a.id);
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
    io_.schedule(a.report_due, a.id);
}

} // namespace tasksup::runtime::detail

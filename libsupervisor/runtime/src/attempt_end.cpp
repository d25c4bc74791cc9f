#include "process_reactor.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>

#include <sys/wait.h>

namespace tasksup::runtime::detail {

namespace fs = std::filesystem;

/// How often an adopted attempt's log is looked at for new output.
constexpr std::chrono::milliseconds follow_interval{50};

namespace {

/// Reads how the agent ended from the exit record its shim wrote; when it
/// cannot, says why in `infrastructure_error` and kills what is left.
void read_exit_record(attempt& a) {
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

} // namespace

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
    if (!io_.take_end(a))
      return;
    io_.unwatch(a.control_fd);
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
    io_.unwatch(a.pidfd);
    close_fd(a.pidfd);
    close_fd(a.control_fd);
  }
  if (a.adopted) {
    a.drain_until = now + options_.drain_timeout;
    if (!a.paused && io_.follow_log(a))
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
    io_.schedule(now + options_.drain_timeout, id);
    io_.schedule(now + options_.group_exit_timeout, id);
  }
}

void reactor::read_output(attempt& a, output_stream stream) {
  // The shim reports the agent's start before it forwards any output, so
  // the report is there to take before the first line.
  if (take_report(a) == report_state::failed || a.ending_shim)
    return; // reported (`a` is gone), or its shim is being ended
  if (io_.read_output(a, stream))
    advance(a); // both pipes ended
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
      report_failed(a, launcher_.not_reported_text());
      return; // reported (`a` is gone), or its shim is being ended
    }
  }
  if (!a.exited) {
    if (a.adopted && !a.paused && a.drain_until && now >= *a.drain_until) {
      // drain_until is the next look at an adopted attempt's log.
      io_.follow_log(a);
      a.drain_until = now + follow_interval;
      io_.schedule(*a.drain_until, a.id);
    }
    if (a.kill_at && now >= *a.kill_at) {
      a.kill_at.reset();
      signal_group(a, SIGKILL);
    }
    return;
  }
  if (!a.eof) {
    if (a.paused)
      return; // io_.set_paused(false) starts the drain again
    if (a.served && a.shim_ok) {
      if (!io_.drain_after_end(a))
        return; // paused
    } else if (a.adopted && io_.follow_log(a)) {
      a.eof = true;
    } else if (a.adopted) {
      if (!a.paused) {
        // The log is behind its index (cannot be, once the shim exited,
        // unless the file was cut): look again shortly, not forever.
        if (a.drain_until && now >= *a.drain_until) {
          warn_("process runtime: " + a.log_path +
                " is shorter than output.streams says; stopped reading");
          a.eof = true;
        } else {
          io_.schedule(now + poll_interval, a.id);
          return;
        }
      } else {
        return;
      }
    } else if (a.drain_until && now >= *a.drain_until) {
      warn_("process runtime: output of process " + std::to_string(a.pid) +
            " still open " + std::to_string(options_.drain_timeout.count()) +
            " ms after it exited (held by a process outside its group); "
            "stopped reading");
      io_.close_output(a);
    } else {
      return;
    }
  }
  if (!reaper_.group_gone(a)) {
    if (a.group_until && now < *a.group_until) {
      io_.schedule(now + poll_interval, a.id);
      return;
    }
    warn_("process runtime: processes of group " + std::to_string(a.pid) +
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
      warn_("process runtime: " + w);
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
        warn_("process runtime: an on_notice callback threw");
      }
    }
    out.tail = a.capture->tail();
    out.log_path = a.log_path;
    if (!a.capture->log_error().empty())
      warn_("process runtime: " + a.capture->log_error());
  }
  if (a.cgroup) {
    out.oom_killed = a.cgroup->oom_killed();
    reaper_.release(std::move(*a.cgroup));
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
        warn_("process runtime: more than " + std::to_string(max_artifacts) +
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
    io_.unwatch(a.pidfd);
  }
  close_fd(a.pidfd);
  close_fd(a.control_fd);
  io_.close_output(a);
  if (auto handle = a.handle.lock())
    handle->mark_ended();
  auto node = attempts_.extract(a.id);
  // Removed before the callback, so a stop() it triggers is a no-op.
  deliver_sync(node.mapped()->cb, std::move(out));
}

} // namespace tasksup::runtime::detail

// One attempt of tasksup-shim: the agent started in its own process group,
// its pipes read into output.log and forwarded to the runtime in order, its
// signals, its group's end and the records a restarted node reads.

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

// ---- starting the agent ----------------------------------------------------

struct started_agent {
  pid_t pid = -1;
  int out = -1;
  int err = -1;
  int failed_stage = 0;
  int failed_errno = 0;
};

/// Started once, reused by every attempt of a serving shim.
dt::child_stack_pool& child_stacks() {
  static dt::child_stack_pool pool;
  return pool;
}

started_agent start_agent(const options& o) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    die(std::string{"cannot create pipes: "} + std::strerror(errno));
  static int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    die(std::string{"cannot open /dev/null: "} + std::strerror(errno));
  started_agent a;
  a.out = out[0];
  a.err = err[0];
  // The runtime's own spawn (clone with CLONE_VM | CLONE_VFORK, like
  // posix_spawn): nothing of the shim is copied, every handler is reset and
  // nothing of ours leaks into the agent. A per-attempt shim runs in the
  // agent's directory and environment already.
  dt::child_plan plan;
  plan.argv = o.argv;
  char** envp = o.envp.empty() ? environ : const_cast<char**>(o.envp.data());
  const char* path = nullptr;
  for (auto** e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PATH=", 5) == 0)
      path = *e + 5;
    plan.envp.push_back(*e);
  }
  plan.envp.push_back(nullptr);
  // execvp's search when PATH is unset: the default path.
  plan.candidates =
    dt::exec_candidates(o.argv[0], path != nullptr ? path : "/bin:/usr/bin");
  plan.cwd = o.cwd.empty() ? "." : o.cwd;
  plan.stdin_fd = devnull;
  plan.output_fd = out[1];
  plan.error_fd = err[1];
  sigemptyset(&plan.mask);
  // The only disposition the shim changed (it has no handlers).
  plan.reset_only = {SIGPIPE};
  plan.caller_has_handlers = false;
  plan.want_pidfd = false;
  if (!o.cgroup.empty()) {
    auto procs = o.cgroup + "/cgroup.procs";
    plan.cgroup_fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (plan.cgroup_fd < 0) {
      a.failed_stage = dt::stage_cgroup;
      a.failed_errno = errno;
    }
  }
  if (a.failed_stage == 0 &&
      (!dt::raise_fd(plan.output_fd) || !dt::raise_fd(plan.error_fd)))
    die(std::string{"cannot prepare descriptors: "} + std::strerror(errno));
  if (a.failed_stage == 0) {
    dt::child_stack stack{child_stacks()};
    if (stack.top() == nullptr)
      die(std::string{"cannot map a stack: "} + std::strerror(errno));
    auto spawned = dt::spawn_child(plan, stack.top());
    if (spawned.pid < 0)
      die(std::string{"cannot start a process: "} + std::strerror(spawned.err));
    a.pid = spawned.pid;
    a.failed_stage = plan.failed_stage;
    a.failed_errno = plan.failed_err;
  }
  dt::close_fd(plan.cgroup_fd);
  dt::close_fd(plan.output_fd);
  dt::close_fd(plan.error_fd);
  return a;
}

} // namespace

[[noreturn]] void die(const std::string& text, int code) {
  auto line = "tasksup-shim: " + text + "\n";
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
  std::_Exit(code);
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    auto n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

void shim::open_log() {
  rt::output_capture_limits limits;
  limits.log_bytes = o_.log_bytes;
  limits.tail_lines = 0;
  auto cap =
    rt::output_capture::create(o_.attempt_dir + "/output.log", {}, limits);
  if (!cap)
    die(cap.error().to_string());
  capture_.emplace(std::move(*cap));
  auto index = o_.attempt_dir + "/" + std::string{dt::stream_index_name};
  index_fd_ =
    ::open(index.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
           rt::private_file_mode);
  if (index_fd_ < 0)
    die(index + ": cannot create: " + std::strerror(errno));
  // One record per write to the log; written after the bytes it describes,
  // so a reader never trusts bytes the index does not cover yet.
  capture_->set_log_observer([this](char kind, std::size_t bytes) {
    if (index_fd_ < 0)
      return;
    index_buf_.clear();
    index_buf_ += kind;
    index_buf_ += ' ';
    index_buf_ += std::to_string(bytes);
    index_buf_ += '\n';
    write_all(index_fd_, index_buf_);
  });
}

int shim::next_to_read(bool ready_out, bool ready_err) const {
  // Both have bytes waiting: which were written first is not knowable from
  // two pipes. Stdout first, as before the shim kept one read at a time:
  // an agent's output and then its final error line, and a line on stdout
  // and then a longer one on stderr, both come out in order. A flood on
  // stdout cannot hold stderr back for ever: an agent blocked on a full
  // stderr pipe writes no more stdout, which then drains.
  return ready_out || !ready_err ? 0 : 1;
}

void shim::read_stream(int index) {
  auto& s = streams_[index];
  auto n = ::read(s.in, buf_.data(), buf_.size());
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (n <= 0) {
    ::close(s.in);
    s.in = -1;
    return;
  }
  std::string_view bytes{buf_.data(), static_cast<std::size_t>(n)};
  capture_->feed(s.kind, bytes);
  if (!forwarding_)
    return;
  pending_.assign(bytes.data(), bytes.size());
  pending_stream_ = index;
  flush_pending(false);
}

bool shim::other_drained() const {
  if (one_channel_)
    return true;
  int unread = 0;
  // FIONREAD on a pipe's write end counts what its reader has not taken.
  if (::ioctl(streams_[1 - pending_stream_].out, FIONREAD, &unread) != 0)
    return true; // not a pipe (a file, a terminal): nothing is reordered
  return unread == 0;
}

void shim::drop_forwarding() {
  forwarding_ = false;
  pending_.clear();
}

void shim::flush_pending(bool block) {
  while (forwarding_ && !pending_.empty()) {
    if (!other_drained()) {
      // No event says "the reader emptied the pipe": blocking, look again
      // after `reader_wait`; else the main loop does (poll_timeout).
      // A reader that went away leaves its bytes unread for ever: POLLERR.
      pollfd p{streams_[1 - pending_stream_].out, 0, 0};
      if (poll_for(&p, 1,
                   block ? reader_wait() : std::chrono::microseconds{0}) > 0 &&
          (p.revents & (POLLERR | POLLHUP)) != 0)
        drop_forwarding();
      else if (!block)
        return;
      continue;
    }
    reader_wait_ = std::chrono::microseconds{0};
    auto& s = streams_[pending_stream_];
    auto n = ::write(s.out, pending_.data(), pending_.size());
    if (n > 0) {
      pending_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      if (!block)
        return;
      pollfd p{s.out, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    // The runtime is gone (EPIPE): the log goes on alone.
    drop_forwarding();
  }
}

void shim::signal_group(int sig) {
  if (agent_ > 0 && !group_empty_ && ::kill(-agent_, sig) != 0 &&
      errno == ESRCH && !agent_running_)
    group_empty_ = true;
}

void shim::reap() {
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(-1, &status, WNOHANG);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return;
    if (r == agent_ && agent_running_) {
      agent_running_ = false;
      wait_status_ = status;
      ended_ = clock_type::now();
      // Nothing the agent started outlives it; what it wrote stays readable.
      signal_group(SIGKILL);
      drain_until_ = ended_ + o_.drain;
      group_until_ = ended_ + o_.group;
    }
    // Any other child is an orphan of the agent (we are a subreaper).
  }
}

void shim::on_signals() {
  signalfd_siginfo infos[8];
  ssize_t n;
  do {
    n = ::read(signal_fd_, infos, sizeof infos);
    for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof infos[0]); ++i)
      on_signal(infos[i].ssi_signo);
  } while (n == static_cast<ssize_t>(sizeof infos));
}

void shim::on_signal(std::uint32_t signo) {
  switch (signo) {
    case SIGCHLD:
      reap();
      break;
    case SIGTERM:
      if (agent_running_) {
        signal_group(SIGTERM);
        // A stopped process only sees SIGTERM once continued.
        signal_group(SIGCONT);
      }
      break;
    case SIGUSR1:
      signal_group(SIGKILL);
      break;
    default:
      break; // SIGINT, SIGHUP: not ours to act on
  }
}

bool shim::group_gone() {
  if (group_empty_)
    return true;
  reap();
  if (::kill(-agent_, 0) == 0 || errno == EPERM) {
    ::kill(-agent_, SIGKILL);
    return false;
  }
  group_empty_ = errno == ESRCH;
  return group_empty_;
}

bool shim::blocked() const {
  return forwarding_ && !pending_.empty();
}

std::optional<std::chrono::microseconds>
shim::poll_timeout(bool awaiting_reader) {
  using std::chrono::microseconds;
  // Waiting for the runtime to read the other stream: no event tells.
  if (awaiting_reader)
    return reader_wait();
  if (agent_running_ || blocked())
    return std::nullopt;
  auto now = clock_type::now();
  // The group is looked at again this often.
  microseconds t = std::chrono::milliseconds{10};
  if (drain_until_)
    t = std::min(t, std::max(microseconds{0}, std::chrono::ceil<microseconds>(
                                                *drain_until_ - now)));
  return t;
}

std::chrono::microseconds shim::reader_wait() {
  using std::chrono::microseconds;
  reader_wait_ = reader_wait_.count() == 0
                   ? microseconds{20}
                   : std::min(reader_wait_ * 2, microseconds{1000});
  return reader_wait_;
}

int shim::poll_for(pollfd* fds, std::size_t n,
                   std::optional<std::chrono::microseconds> timeout) {
  if (!timeout)
    return ::ppoll(fds, n, nullptr, nullptr);
  auto us = timeout->count();
  timespec ts{static_cast<time_t>(us / 1000000),
              static_cast<long>(us % 1000000) * 1000};
  return ::ppoll(fds, n, &ts, nullptr);
}

void shim::finish() {
  capture_->finish();
  if (index_fd_ >= 0) {
    ::close(index_fd_);
    index_fd_ = -1;
  }
  record_.bytes_not_logged = capture_->bytes_not_logged();
  if (!capture_->log_error().empty())
    record_.warnings.push_back(capture_->log_error());
  record_.duration_us = static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::microseconds>(ended_ - started_)
      .count());
  auto path = o_.attempt_dir + "/" + std::string{dt::exit_record_name};
  record_text_ = dt::format_exit_record(record_);
  auto err = dt::write_file_atomically(path, record_text_);
  if (!err.empty())
    die("cannot record the agent's exit: " + err);
}

void shim::report(pid_t pid) {
  auto line = std::to_string(pid) + "\n";
  if (serving_) {
    if (control_fd_ >= 0)
      write_all(control_fd_, line);
    return;
  }
  write_all(o_.status_fd, line);
  ::close(o_.status_fd);
}

int shim::run() {
  if (!serving_)
    ::fcntl(o_.status_fd, F_SETFD, FD_CLOEXEC);
  open_log();

  started_ = clock_type::now();
  auto agent = start_agent(o_);
  agent_ = agent.pid;
  agent_running_ = true;
  streams_[0] = {agent.out, o_.out_fd, rt::output_stream::out};
  streams_[1] = {agent.err, o_.err_fd, rt::output_stream::err};
  for (auto& s : streams_) {
    ::fcntl(s.in, F_SETFL, O_NONBLOCK);
    // The runtime's pipes to a serving shim are non-blocking already.
    auto flags = ::fcntl(s.out, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK) == 0)
      ::fcntl(s.out, F_SETFL, flags | O_NONBLOCK);
  }
  // A serving shim is always given two pipes.
  struct stat st1 {};
  struct stat st2 {};
  one_channel_ = !serving_ && ::fstat(o_.out_fd, &st1) == 0 &&
                 ::fstat(o_.err_fd, &st2) == 0 && st1.st_dev == st2.st_dev &&
                 st1.st_ino == st2.st_ino;

  if (agent.failed_stage != 0) {
    // The child exits at once; its exit status says nothing of the agent.
    int status;
    while (agent.pid > 0 && ::waitpid(agent.pid, &status, 0) < 0 &&
           errno == EINTR) {
    }
    agent_running_ = false;
    group_empty_ = true;
    ended_ = clock_type::now();
    auto e = agent.failed_errno;
    std::string line;
    if (agent.failed_stage == dt::stage_exec &&
        (e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG)) {
      record_.exit_code = 127;
      line = "tasksup: " + std::string{o_.argv[0]} + ": command not found\n";
    } else if (agent.failed_stage == dt::stage_exec &&
               (e == EACCES || e == EPERM || e == ENOEXEC || e == EISDIR)) {
      // Worded so that the classifier sees an agent failure (126), not the
      // "permission denied" of a fatal authentication error.
      record_.exit_code = 126;
      line = "tasksup: " + std::string{o_.argv[0]} + ": " +
             (e == ENOEXEC ? "not an executable format" : "not executable") +
             "\n";
    } else {
      record_.started = false;
      record_.exit_code = 1;
      record_.error = "cannot start " + std::string{o_.argv[0]} + ": " +
                      dt::stage_text(agent.failed_stage) + ": " +
                      std::strerror(e);
    }
    report(0);
    if (!line.empty()) {
      capture_->feed(rt::output_stream::out, line);
      pending_ = line;
      pending_stream_ = 0;
      flush_pending(true);
    }
    for (auto& s : streams_)
      ::close(s.in);
    finish();
    return 0;
  }

  dt::shim_record rec;
  // The shim's own identity is the same for every attempt it serves.
  static const pid_t self = ::getpid();
  static const std::uint64_t self_start =
    dt::process_start_time(self).value_or(0);
  rec.shim_pid = self;
  rec.shim_start = self_start;
  rec.agent_pid = agent.pid;
  rec.agent_pgid = agent.pid;
  rec.agent_start = dt::process_start_time(agent.pid).value_or(0);
  rec.cgroup = o_.cgroup;
  auto rec_path = o_.attempt_dir + "/" + std::string{dt::shim_record_name};
  if (auto err =
        dt::write_file_atomically(rec_path, dt::format_shim_record(rec));
      !err.empty())
    record_.warnings.push_back("cannot write the shim record: " + err);
  report(agent.pid);

  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    if (control_fd_ >= 0)
      fds.push_back({control_fd_, POLLIN, 0});
    // One read at a time: the agent's streams are read only once what was
    // read before has been forwarded, so it is forwarded in that order.
    flush_pending(false);
    bool awaiting_reader = false;
    if (!blocked()) {
      for (auto& s : streams_)
        if (s.in >= 0)
          fds.push_back({s.in, POLLIN, 0});
    } else if (other_drained()) {
      fds.push_back({streams_[pending_stream_].out, POLLOUT, 0});
    } else {
      awaiting_reader = true;
    }
    auto n = poll_for(fds.data(), fds.size(), poll_timeout(awaiting_reader));
    if (n < 0 && errno != EINTR)
      die(std::string{"poll failed: "} + std::strerror(errno));
    bool ready[2] = {false, false};
    for (auto& p : fds) {
      if (p.revents == 0)
        continue;
      if (p.fd == signal_fd_) {
        on_signals();
      } else if (p.fd == control_fd_) {
        // The runtime died (its end of the pipe closed): nobody will ask
        // for this attempt again; with --orphan kill, the agent goes with
        // it. (The runtime sends nothing while an attempt runs.)
        char c;
        auto got = ::read(control_fd_, &c, 1);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          control_fd_ = -1;
          runtime_gone_ = true;
          drop_forwarding();
          if (o_.kill_orphan)
            signal_group(SIGKILL);
        }
      } else if ((p.events & POLLOUT) != 0) {
        flush_pending(false);
      } else {
        for (int i = 0; i < 2; ++i)
          ready[i] =
            ready[i] || (p.fd == streams_[i].in && streams_[i].in >= 0);
      }
    }
    if (!blocked() && (ready[0] || ready[1]))
      read_stream(next_to_read(ready[0], ready[1]));
    if (agent_running_)
      continue;
    // Output the runtime has not taken yet is not lingering output: the
    // drain waits for the runtime, not against it.
    if (blocked()) {
      drain_until_.reset(); // starts again once the runtime has read
      continue;
    }
    if (!drain_until_)
      drain_until_ = clock_type::now() + o_.drain;
    bool eof = streams_[0].in < 0 && streams_[1].in < 0;
    if (!eof && clock_type::now() >= *drain_until_) {
      record_.warnings.push_back(
        "output of process " + std::to_string(agent_) + " still open " +
        std::to_string(o_.drain.count()) +
        " ms after it exited (held by a process outside its group); "
        "stopped reading");
      for (auto& s : streams_)
        if (s.in >= 0) {
          ::close(s.in);
          s.in = -1;
        }
      eof = true;
    }
    if (!eof)
      continue;
    if (!group_gone() && clock_type::now() < *group_until_)
      continue;
    if (!group_empty_)
      record_.warnings.push_back(
        "processes of group " + std::to_string(agent_) +
        " survived SIGKILL for " + std::to_string(o_.group.count()) +
        " ms; reporting the attempt anyway");
    break;
  }
  if (WIFEXITED(wait_status_)) {
    record_.exit_code = WEXITSTATUS(wait_status_);
  } else if (WIFSIGNALED(wait_status_)) {
    record_.signal = WTERMSIG(wait_status_);
    record_.exit_code = 128 + record_.signal;
  }
  // Everything the runtime has not read yet goes before the exit (a full
  // pipe is waited for).
  flush_pending(true);
  finish();
  return 0;
}

} // namespace tasksup::agent_shim

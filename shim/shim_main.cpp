// tasksup-shim: the small process between the process runtime and one agent
// (like conmon or containerd-shim). It starts the agent in its own process
// group, holds its stdout and stderr pipes, writes output.log (with
// output.streams saying which stream each byte came from) and, when the
// agent has ended, exit.status — so a node that restarted can re-attach to
// the attempt or read how it ended. While its runtime is there it forwards
// the agent's output to it (fd 1 and 2) without buffering more than one
// read, so a runtime that stops reading stops the agent, as a direct pipe
// would. The runtime reads two pipes and cannot tell which bytes came first,
// so the shim keeps the order for it: it holds one read at a time and
// forwards it only once the runtime has read everything of the other
// stream. (Else an agent's last line on stderr after a flood on stdout
// could reach the runtime before the flood's end and fall out of the tail
// the classifier scans.)
//
//   tasksup-shim --attempt-dir DIR [--log-bytes N] [--drain-ms N]
//                [--group-ms N] [--orphan keep|kill] [--cgroup DIR]
//                [--status-fd N] -- COMMAND [ARG...]
//
// The environment and working directory are the agent's (the runtime
// starts the shim with them). Signals: SIGTERM stops the agent (SIGTERM and
// SIGCONT to its group), SIGUSR1 kills the group. With `--orphan kill`,
// stdin is a pipe from the runtime: when it hangs up (the runtime died, even
// by SIGKILL) the shim kills the agent's group and records its end. With
// `--orphan keep`, the shim outlives its runtime and keeps logging.
//
// On --status-fd (default 3) the shim writes the agent's pid and a newline
// once the agent has exec'd (0 when it could not start), then closes it.

#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/output_capture.hpp"

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
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace rt = tasksup::runtime;
namespace dt = tasksup::runtime::detail;
using clock_type = std::chrono::steady_clock;

constexpr int exit_usage = 64;
constexpr int exit_failure = 70;

struct options {
  std::string attempt_dir;
  std::uint64_t log_bytes = 100 * 1024 * 1024;
  std::chrono::milliseconds drain{2000};
  std::chrono::milliseconds group{5000};
  bool kill_orphan = false;
  std::string cgroup;
  int status_fd = 3;
  std::vector<char*> argv;
};

[[noreturn]] void die(const std::string& text, int code = exit_failure) {
  auto line = "tasksup-shim: " + text + "\n";
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
  std::_Exit(code);
}

std::uint64_t number_arg(const char* flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  auto v = std::strtoull(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || value[0] == '-')
    die(std::string{flag} + ": expected a whole number, got '" + value + "'",
        exit_usage);
  return v;
}

options parse_args(int argc, char** argv) {
  options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view a{argv[i]};
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc)
      die("option " + std::string{a} + " needs a value", exit_usage);
    const char* v = argv[++i];
    if (a == "--attempt-dir")
      o.attempt_dir = v;
    else if (a == "--log-bytes")
      o.log_bytes = number_arg(argv[i - 1], v);
    else if (a == "--drain-ms")
      o.drain = std::chrono::milliseconds{number_arg(argv[i - 1], v)};
    else if (a == "--group-ms")
      o.group = std::chrono::milliseconds{number_arg(argv[i - 1], v)};
    else if (a == "--orphan" && std::string_view{v} == "kill")
      o.kill_orphan = true;
    else if (a == "--orphan" && std::string_view{v} == "keep")
      o.kill_orphan = false;
    else if (a == "--cgroup")
      o.cgroup = v;
    else if (a == "--status-fd")
      o.status_fd = static_cast<int>(number_arg(argv[i - 1], v));
    else
      die("unknown option " + std::string{a} + " " + v, exit_usage);
  }
  if (o.attempt_dir.empty() || o.attempt_dir.front() != '/')
    die("--attempt-dir: an absolute directory is required", exit_usage);
  for (; i < argc; ++i)
    o.argv.push_back(argv[i]);
  if (o.argv.empty())
    die("no command after --", exit_usage);
  o.argv.push_back(nullptr);
  return o;
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

// ---- starting the agent ----------------------------------------------------

enum stage : int { stage_cgroup = 1, stage_setpgid, stage_stdio, stage_exec };

const char* stage_words(int s) {
  switch (s) {
    case stage_cgroup:
      return "joining the memory cgroup";
    case stage_setpgid:
      return "creating the process group";
    case stage_stdio:
      return "setting up stdin/stdout/stderr";
    default:
      return "executing the command";
  }
}

struct started_agent {
  pid_t pid = -1;
  int out = -1;
  int err = -1;
  int failed_stage = 0;
  int failed_errno = 0;
};

started_agent start_agent(const options& o) {
  int out[2], err[2], report[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(report, O_CLOEXEC) != 0)
    die(std::string{"cannot create pipes: "} + std::strerror(errno));
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0)
    die(std::string{"cannot open /dev/null: "} + std::strerror(errno));
  std::string procs = o.cgroup.empty() ? "" : o.cgroup + "/cgroup.procs";
  pid_t pid = ::fork();
  if (pid < 0)
    die(std::string{"cannot fork: "} + std::strerror(errno));
  if (pid == 0) {
    auto fail = [&](int s) {
      int msg[2] = {s, errno};
      [[maybe_unused]] auto n = ::write(report[1], msg, sizeof msg);
      ::_exit(127);
    };
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (!procs.empty()) {
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1)
        fail(stage_cgroup);
      ::close(fd);
    }
    if (::setpgid(0, 0) != 0)
      fail(stage_setpgid);
    if (::dup2(devnull, 0) < 0 || ::dup2(out[1], 1) < 0 ||
        ::dup2(err[1], 2) < 0)
      fail(stage_stdio);
    // Nothing of ours leaks into the agent (the runtime's pipes, the log).
    if (::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) != 0)
      for (int fd = 3; fd < 65536; ++fd)
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::execvp(o.argv[0], o.argv.data());
    fail(stage_exec);
  }
  // Also here, so the group exists whichever of us runs first.
  ::setpgid(pid, pid);
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  ::close(devnull);
  started_agent a;
  a.pid = pid;
  a.out = out[0];
  a.err = err[0];
  int msg[2] = {0, 0};
  ssize_t n;
  do {
    n = ::read(report[0], msg, sizeof msg);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof msg)) {
    a.failed_stage = msg[0];
    a.failed_errno = msg[1];
  }
  return a;
}

// ---- the shim
// ----------------------------------------------------------------

class shim {
public:
  explicit shim(options o) : o_(std::move(o)) {}

  int run();

private:
  struct stream {
    int in = -1;  // the agent's pipe
    int out = -1; // ours to the runtime (1 or 2)
    rt::output_stream kind = rt::output_stream::out;
  };

  void open_log();
  /// The agent stream to read next, of those `poll` found ready.
  int next_to_read(bool ready_out, bool ready_err) const;
  void read_stream(int index);
  /// Forwards `pending_` (blocking until it is written when `block`).
  void flush_pending(bool block);
  /// Whether the runtime has read everything forwarded on the stream other
  /// than the pending one, so that the pending bytes cannot overtake it.
  bool other_drained() const;
  void drop_forwarding();
  void on_signals();
  void reap();
  void signal_group(int sig);
  bool group_gone();
  void finish();
  int poll_timeout() const;
  /// True while output waits for the runtime to read it.
  bool blocked() const;

  options o_;
  std::optional<rt::output_capture> capture_;
  int index_fd_ = -1;
  std::string index_buf_;
  stream streams_[2];
  /// Read, logged, not yet forwarded (from `streams_[pending_stream_]`).
  std::string pending_;
  int pending_stream_ = 0;
  /// Fds 1 and 2 are one pipe (or file): nothing to keep in order.
  bool one_channel_ = false;
  bool forwarding_ = true;
  int signal_fd_ = -1;
  int control_fd_ = -1;
  pid_t agent_ = -1;
  bool agent_running_ = false;
  bool group_empty_ = false;
  int wait_status_ = 0;
  clock_type::time_point started_;
  clock_type::time_point ended_;
  std::optional<clock_type::time_point> drain_until_;
  std::optional<clock_type::time_point> group_until_;
  dt::exit_record record_;
  std::vector<char> buf_ = std::vector<char>(64 * 1024);
};

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
  index_fd_ = ::open(index.c_str(),
                     O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
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
      // No event says "the reader emptied the pipe": blocking, look every
      // millisecond; else the main loop looks again in one (poll_timeout).
      // A reader that went away leaves its bytes unread for ever: POLLERR.
      pollfd p{streams_[1 - pending_stream_].out, 0, 0};
      if (::poll(&p, 1, block ? 1 : 0) > 0 &&
          (p.revents & (POLLERR | POLLHUP)) != 0)
        drop_forwarding();
      else if (!block)
        return;
      continue;
    }
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
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof info) ==
         static_cast<ssize_t>(sizeof info)) {
    switch (info.ssi_signo) {
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

int shim::poll_timeout() const {
  // Waiting for the runtime to read the other stream: no event tells.
  if (blocked() && !other_drained())
    return 1;
  if (agent_running_ || blocked())
    return -1;
  auto now = clock_type::now();
  auto left = [&](clock_type::time_point t) {
    return static_cast<int>(std::max<long long>(
      0, std::chrono::ceil<std::chrono::milliseconds>(t - now).count()));
  };
  int t = 10; // the group is looked at again this often
  if (drain_until_)
    t = std::min(t, left(*drain_until_));
  return t;
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
  auto err = dt::write_file_atomically(path, dt::format_exit_record(record_));
  if (!err.empty())
    die("cannot record the agent's exit: " + err);
}

int shim::run() {
  // Signals arrive through a descriptor; SIGPIPE is an error code instead.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGTERM, SIGUSR1, SIGINT, SIGHUP, SIGQUIT})
    sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd_ < 0)
    die(std::string{"cannot create a signalfd: "} + std::strerror(errno));
  // Orphans of the agent become ours, so killing its group reaps them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (o_.kill_orphan) {
    control_fd_ = 0;
    ::fcntl(0, F_SETFD, FD_CLOEXEC);
  }
  ::fcntl(o_.status_fd, F_SETFD, FD_CLOEXEC);
  open_log();

  started_ = clock_type::now();
  auto agent = start_agent(o_);
  agent_ = agent.pid;
  agent_running_ = true;
  streams_[0] = {agent.out, 1, rt::output_stream::out};
  streams_[1] = {agent.err, 2, rt::output_stream::err};
  for (auto& s : streams_) {
    ::fcntl(s.in, F_SETFL, O_NONBLOCK);
    ::fcntl(s.out, F_SETFL, ::fcntl(s.out, F_GETFL) | O_NONBLOCK);
  }
  struct stat st1 {};
  struct stat st2 {};
  one_channel_ = ::fstat(1, &st1) == 0 && ::fstat(2, &st2) == 0 &&
                 st1.st_dev == st2.st_dev && st1.st_ino == st2.st_ino;

  if (agent.failed_stage != 0) {
    // The child exits at once; its exit status says nothing of the agent.
    int status;
    while (::waitpid(agent.pid, &status, 0) < 0 && errno == EINTR) {
    }
    agent_running_ = false;
    group_empty_ = true;
    ended_ = clock_type::now();
    auto e = agent.failed_errno;
    std::string line;
    if (agent.failed_stage == stage_exec &&
        (e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG)) {
      record_.exit_code = 127;
      line = "tasksup: " + std::string{o_.argv[0]} + ": command not found\n";
    } else if (agent.failed_stage == stage_exec &&
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
                      stage_words(agent.failed_stage) + ": " + std::strerror(e);
    }
    write_all(o_.status_fd, "0\n");
    ::close(o_.status_fd);
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
  rec.shim_pid = ::getpid();
  rec.shim_start = dt::process_start_time(rec.shim_pid).value_or(0);
  rec.agent_pid = agent.pid;
  rec.agent_pgid = agent.pid;
  rec.agent_start = dt::process_start_time(agent.pid).value_or(0);
  rec.cgroup = o_.cgroup;
  auto rec_path = o_.attempt_dir + "/" + std::string{dt::shim_record_name};
  if (auto err =
        dt::write_file_atomically(rec_path, dt::format_shim_record(rec));
      !err.empty())
    record_.warnings.push_back("cannot write the shim record: " + err);
  write_all(o_.status_fd, std::to_string(agent.pid) + "\n");
  ::close(o_.status_fd);

  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    if (control_fd_ >= 0)
      fds.push_back({control_fd_, POLLIN, 0});
    // One read at a time: the agent's streams are read only once what was
    // read before has been forwarded, so it is forwarded in that order.
    flush_pending(false);
    if (!blocked()) {
      for (auto& s : streams_)
        if (s.in >= 0)
          fds.push_back({s.in, POLLIN, 0});
    } else if (other_drained()) {
      fds.push_back({streams_[pending_stream_].out, POLLOUT, 0});
    }
    auto n = ::poll(fds.data(), fds.size(), poll_timeout());
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
        // for this attempt again; the agent goes with it.
        char c;
        if (::read(control_fd_, &c, 1) <= 0) {
          control_fd_ = -1;
          drop_forwarding();
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
  // Everything the runtime has not read yet goes before the exit.
  for (auto& s : streams_)
    ::fcntl(s.out, F_SETFL, ::fcntl(s.out, F_GETFL) & ~O_NONBLOCK);
  flush_pending(true);
  finish();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  shim s{std::move(opts)};
  return s.run();
}

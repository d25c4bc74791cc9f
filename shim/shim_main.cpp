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
//
//   tasksup-shim --serve DIR [--orphan kill|keep]
//
// A serving shim runs the attempts of one task (their directories are in
// DIR) one after the other, so that an attempt costs one process start,
// the agent's, not two. Stdin is a Unix stream socket to the runtime. Each
// request (`shim_request`: the options above, the agent's working
// directory and whole environment; its length first, then the payload)
// brings the two pipes to forward stdout and stderr to (SCM_RIGHTS). The
// shim answers on the socket with the agent's pid and a newline, runs the
// attempt exactly as a per-attempt shim would (log, records, signals, the
// group's end), closes the two pipes and writes `end` and a newline. When
// the socket hangs up (the runtime retired the shim, or died), an idle shim
// exits; a busy one does what --orphan says and exits after the attempt.
// Signals between attempts are dropped: they were meant for an attempt
// that has ended.

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
    else if (a == "--serve")
      o.serve_dir = v;
    else
      die("unknown option " + std::string{a} + " " + v, exit_usage);
  }
  if (!o.serve_dir.empty()) {
    if (o.serve_dir.front() != '/' || i < argc || !o.attempt_dir.empty())
      die("--serve: an absolute directory, and no --attempt-dir or command",
          exit_usage);
    return o;
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

} // namespace

} // namespace tasksup::agent_shim

using namespace tasksup::agent_shim;

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  // Signals arrive through a descriptor; SIGPIPE is an error code instead.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGTERM, SIGUSR1, SIGINT, SIGHUP, SIGQUIT})
    sigaddset(&mask, sig);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signal_fd < 0)
    die(std::string{"cannot create a signalfd: "} + std::strerror(errno));
  // Orphans of the agent become ours, so killing its group reaps them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // The waits for the runtime to read are tens of microseconds: the
  // default slack (50 µs) would more than double them.
  ::prctl(PR_SET_TIMERSLACK, 5000UL);
  if (!opts.serve_dir.empty())
    return serve(opts, signal_fd);
  int control = -1;
  if (opts.kill_orphan) {
    control = 0;
    ::fcntl(0, F_SETFD, FD_CLOEXEC);
  }
  shim s{std::move(opts), signal_fd, control, false};
  return s.run();
}

#include "process_spawn.hpp"

#include "tasksup/runtime/private_files.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace fs = std::filesystem;

std::string errno_text(int err) {
  return std::strerror(err);
}

void close_fd(int& fd) noexcept {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

// Moves `fd` to a number >= 3 (close-on-exec), so that setting up the
// child's stdin/stdout/stderr cannot overwrite it.
bool raise_fd(int& fd) {
  if (fd >= 3)
    return true;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0)
    return false;
  ::close(fd);
  fd = moved;
  return true;
}

const char* stage_text(int stage) {
  switch (stage) {
    case stage_cgroup:
      return "joining the memory cgroup";
    case stage_setpgid:
      return "creating the process group";
    case stage_stdio:
      return "setting up stdin/stdout/stderr";
    case stage_chdir:
      return "entering the working directory";
    default:
      return "executing the command";
  }
}

namespace {

// ---- the child side of the spawn ------------------------------------------
//
// The child is cloned with CLONE_VM | CLONE_VFORK, like glibc's posix_spawn:
// no page tables are copied (fork's cost grows with the parent's size), and
// the parent sleeps until the child has called execve or exited. The child
// shares the parent's memory, so it runs on its own stack, makes only
// async-signal-safe system calls, writes nothing of the parent's but its
// report, and ends in execve or _exit.

struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};

[[noreturn]] void child_fail(child_plan& p, int stage, int err) {
  p.failed_stage = stage;
  p.failed_err = err;
  ::_exit(127);
}

int child_main(void* arg) {
  auto& p = *static_cast<child_plan*>(arg);
  // Every signal is blocked (by the parent, across the clone). Handlers of
  // the program must not run here, on this stack in shared memory, so they
  // are reset before anything is unblocked; dispositions and mask are also
  // inherited through exec, and the agent starts clean even when the
  // supervisor ignores SIGPIPE. The handler table is the child's own copy
  // (no CLONE_SIGHAND). The raw system call also resets the signals glibc
  // reserves for itself; SIGKILL and SIGSTOP cannot be changed. Which
  // signals are not at their default is not known without asking the
  // kernel, one call per signal (or reading /proc/self/status, which costs
  // about as much), so all are reset: 62 calls, ~14 us, unless the caller
  // knows which it changed (the shim: SIGPIPE) and names them.
  kernel_sigaction dfl{};
  if (!p.reset_only.empty())
    for (int sig : p.reset_only)
      ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, NSIG / 8);
  else
    for (int sig = 1; sig < NSIG; ++sig)
      if (sig != SIGKILL && sig != SIGSTOP)
        ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, NSIG / 8);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &p.mask, nullptr, NSIG / 8);
  if (p.cgroup_fd >= 0 && ::write(p.cgroup_fd, "0", 1) != 1)
    child_fail(p, stage_cgroup, errno);
  if (::setpgid(0, 0) != 0)
    child_fail(p, stage_setpgid, errno);
  if (::dup2(p.stdin_fd, 0) < 0 || ::dup2(p.output_fd, 1) < 0 ||
      ::dup2(p.error_fd, 2) < 0)
    child_fail(p, stage_stdio, errno);
  // dup2 onto itself would keep close-on-exec set.
  if (p.extra_fd == 3 ? ::fcntl(3, F_SETFD, 0) != 0
                      : p.extra_fd >= 0 && ::dup2(p.extra_fd, 3) < 0)
    child_fail(p, stage_stdio, errno);
  if (::chdir(p.cwd.c_str()) != 0)
    child_fail(p, stage_chdir, errno);
  // Descriptors opened elsewhere in the program without O_CLOEXEC must not
  // leak into the agent (a leaked pipe end would keep another attempt's
  // output open).
  unsigned first = p.extra_fd >= 0 ? 4U : 3U;
  if (::syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    for (int fd = static_cast<int>(first); fd < p.max_fd; ++fd)
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  int err = ENOENT;
  bool saw_eacces = false;
  for (auto& path : p.candidates) {
    ::execve(path.c_str(), p.argv.data(), p.envp.data());
    err = errno;
    if (err == EACCES)
      saw_eacces = true;
    else if (err != ENOENT && err != ENOTDIR && err != ESTALE &&
             err != ENODEV && err != ETIMEDOUT)
      break;
  }
  // Like execvp: a candidate that exists but cannot be executed wins over
  // later misses.
  if (saw_eacces && (err == ENOENT || err == ENOTDIR))
    err = EACCES;
  child_fail(p, stage_exec, err);
}

/// Blocks every signal of the calling thread, including the ones glibc
/// keeps for itself (thread cancellation, set*id), which pthread_sigmask
/// refuses to block; restores the previous mask on destruction.
class all_signals_blocked {
public:
  all_signals_blocked() {
    sigset_t all;
    std::memset(&all, 0xff, sizeof(all));
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old_, NSIG / 8);
  }
  ~all_signals_blocked() {
    ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old_, nullptr, NSIG / 8);
  }
  all_signals_blocked(const all_signals_blocked&) = delete;
  all_signals_blocked& operator=(const all_signals_blocked&) = delete;

private:
  sigset_t old_;
};

} // namespace

void set_command(child_plan& plan, std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env) {
  plan.argv.clear();
  for (auto& arg : args)
    plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  plan.env_strings.clear();
  plan.env_strings.reserve(env.size());
  for (auto& [k, v] : env)
    plan.env_strings.push_back(k + "=" + v);
  plan.envp.clear();
  for (auto& e : plan.env_strings)
    plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  plan.candidates = {args.front()};
}

spawn_result spawn_child(child_plan& plan, void* stack_top) {
  spawn_result r;
  // Blocked across the clone so no handler of the program runs in the
  // child (on its stack, in our memory) before it has reset them.
  std::optional<all_signals_blocked> blocked;
  if (plan.caller_has_handlers)
    blocked.emplace();
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  if (plan.want_pidfd)
    flags |= CLONE_PIDFD;
  r.pid = ::clone(child_main, stack_top, flags, &plan, &r.pidfd);
  r.err = errno;
  return r;
}

// Empties `dir` if it exists and creates it (with parents); returns the error.
// A new attempt's directory usually does not exist yet: then one mkdir is
// all it takes.
std::string fresh_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), private_dir_mode) == 0)
    return {};
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec)
    return "cannot clear " + dir + ": " + ec.message();
  return make_private_dirs(dir);
}

// True if `dir` is a directory holding nothing; false if it holds anything
// or cannot be read. Most agents leave no artifacts, and this costs an open,
// two getdents64 and a close, where a directory iterator adds a stat and
// two fcntl calls.
bool empty_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return false;
  alignas(dirent64) char buf[4096];
  bool empty = true;
  for (;;) {
    auto n = ::getdents64(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      empty = n == 0 && empty;
      break;
    }
    for (decltype(n) at = 0; at < n;) {
      unsigned short reclen;
      std::memcpy(&reclen, buf + at + offsetof(dirent64, d_reclen),
                  sizeof reclen);
      if (reclen == 0) {
        empty = false; // cannot happen; leave it to the full listing
        break;
      }
      const char* name = buf + at + offsetof(dirent64, d_name);
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0)
        empty = false;
      at += reclen;
    }
    if (!empty)
      break;
  }
  ::close(fd);
  return empty;
}

// A cgroup directory name from task id and attempt: no slashes, no dots

std::string find_shim(const std::string& configured, std::string& looked) {
  auto usable = [&](const std::string& path) {
    looked += looked.empty() ? path : ", " + path;
    return !path.empty() && ::access(path.c_str(), X_OK) == 0;
  };
  if (!configured.empty())
    return usable(configured) ? configured : std::string{};
  if (const char* env = std::getenv("TASKSUP_SHIM"); env != nullptr && *env)
    return usable(env) ? std::string{env} : std::string{};
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto beside = (self.parent_path() / "tasksup-shim").string();
    if (usable(beside))
      return beside;
  }
#ifdef TASKSUP_SHIM_BUILD_PATH
  if (usable(TASKSUP_SHIM_BUILD_PATH))
    return TASKSUP_SHIM_BUILD_PATH;
#endif
#ifdef TASKSUP_SHIM_INSTALL_PATH
  if (usable(TASKSUP_SHIM_INSTALL_PATH))
    return TASKSUP_SHIM_INSTALL_PATH;
#endif
  return {};
}

std::vector<std::string> exec_candidates(const std::string& argv0,
                                         const std::string& path_var) {
  if (argv0.find('/') != std::string::npos)
    return {argv0};
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= path_var.size()) {
    auto end = path_var.find(':', begin);
    if (end == std::string::npos)
      end = path_var.size();
    auto dir = path_var.substr(begin, end - begin);
    out.push_back((dir.empty() ? std::string{"."} : dir) + "/" + argv0);
    begin = end + 1;
  }
  return out;
}

} // namespace tasksup::runtime::detail

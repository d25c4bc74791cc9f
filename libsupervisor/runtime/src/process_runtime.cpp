#include "tasksup/runtime/process_runtime.hpp"

#include "memory_cgroup.hpp"
#include "tasksup/runtime/output_capture.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::runtime {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

/// At most this many artifact paths are reported per attempt.
constexpr std::size_t max_artifacts = 10000;

/// Bytes read from one pipe per reactor turn, so one chatty attempt cannot
/// starve the others.
constexpr std::size_t max_read_per_turn = 1024 * 1024;

/// How often to look again for a killed process group or cgroup to vanish.
constexpr std::chrono::milliseconds poll_interval{10};

// Epoll keys: attempt id << 2 | kind. Id 0 is the wake-up eventfd.
constexpr std::uint64_t kind_wake = 0;
constexpr std::uint64_t kind_exit = 1;
constexpr std::uint64_t kind_output = 2;

std::uint64_t key(std::uint64_t id, std::uint64_t kind) {
  return id << 2 | kind;
}

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

// ---- the child side of the spawn ------------------------------------------
//
// The child is cloned with CLONE_VM | CLONE_VFORK, like glibc's posix_spawn:
// no page tables are copied (fork's cost grows with the parent's size), and
// the parent sleeps until the child has called execve or exited. The child
// shares the parent's memory, so it runs on its own stack, makes only
// async-signal-safe system calls, writes nothing of the parent's but its
// report, and ends in execve or _exit.

/// The step of starting the child that failed.
enum child_stage : int {
  stage_cgroup = 1,
  stage_setpgid,
  stage_stdio,
  stage_chdir,
  stage_exec,
};

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

/// Everything the child needs, prepared before the spawn.
struct child_plan {
  std::vector<char*> argv;
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  /// Paths to try in order (argv[0] itself, or argv[0] in each PATH entry).
  std::vector<std::string> candidates;
  std::string cwd;
  int stdin_fd = -1;
  int output_fd = -1;
  int cgroup_fd = -1;
  int max_fd = 1024;
  /// The signal mask to give the agent.
  sigset_t mask;
  /// Written by the child (shared memory) when it cannot exec: the stage
  /// that failed (0: none) and its errno.
  int failed_stage = 0;
  int failed_err = 0;
};

/// Size of the child's stack; it runs a handful of system calls only.
constexpr std::size_t child_stack_size = 64 * 1024;

/// The kernel's struct sigaction (glibc's differs in layout); zeroed, it
/// sets SIG_DFL.
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
  // about as much), so all are reset: 62 calls, ~14 us.
  kernel_sigaction dfl{};
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP)
      ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, NSIG / 8);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &p.mask, nullptr, NSIG / 8);
  if (p.cgroup_fd >= 0 && ::write(p.cgroup_fd, "0", 1) != 1)
    child_fail(p, stage_cgroup, errno);
  if (::setpgid(0, 0) != 0)
    child_fail(p, stage_setpgid, errno);
  if (::dup2(p.stdin_fd, 0) < 0 || ::dup2(p.output_fd, 1) < 0 ||
      ::dup2(p.output_fd, 2) < 0)
    child_fail(p, stage_stdio, errno);
  if (::chdir(p.cwd.c_str()) != 0)
    child_fail(p, stage_chdir, errno);
  // Descriptors opened elsewhere in the program without O_CLOEXEC must not
  // leak into the agent (a leaked pipe end would keep another attempt's
  // output open).
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    for (int fd = 3; fd < p.max_fd; ++fd)
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

/// Stacks for the child, kept for reuse: mapping one per spawn costs an
/// mmap, an mprotect and an munmap (which interrupts every other CPU running
/// one of our threads to flush its TLB). start() runs on any thread, so the
/// pool holds as many stacks as spawns ever ran at once. Each has a guard
/// page below it.
class child_stack_pool {
public:
  child_stack_pool() = default;
  ~child_stack_pool() {
    for (auto* base : free_)
      ::munmap(base, mapping_size);
  }
  child_stack_pool(const child_stack_pool&) = delete;
  child_stack_pool& operator=(const child_stack_pool&) = delete;

  /// A stack's mapping (guard page first), or null with errno set.
  char* take() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (!free_.empty()) {
        auto* base = free_.back();
        free_.pop_back();
        return base;
      }
    }
    void* m = ::mmap(nullptr, mapping_size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
      return nullptr;
    auto* base = static_cast<char*>(m);
    if (::mprotect(base + guard_size, child_stack_size,
                   PROT_READ | PROT_WRITE) != 0) {
      auto err = errno;
      ::munmap(m, mapping_size);
      errno = err;
      return nullptr;
    }
    return base;
  }

  /// Returns a stack from take() once its child has exec'd or exited.
  void give(char* base) {
    std::lock_guard<std::mutex> guard{mtx_};
    try {
      free_.push_back(base);
    } catch (...) {
      ::munmap(base, mapping_size);
    }
  }

  /// The top of the stack in the mapping `base` (stacks grow down).
  static void* top(char* base) { return base + guard_size + child_stack_size; }

private:
  static constexpr std::size_t guard_size = 4096;
  static constexpr std::size_t mapping_size = guard_size + child_stack_size;
  std::mutex mtx_;
  std::vector<char*> free_;
};

/// A stack taken from the pool for one spawn, given back on destruction.
class child_stack {
public:
  explicit child_stack(child_stack_pool& pool)
    : pool_(pool), base_(pool.take()) {}
  ~child_stack() {
    if (base_ != nullptr)
      pool_.give(base_);
  }
  child_stack(const child_stack&) = delete;
  child_stack& operator=(const child_stack&) = delete;

  /// The top of the stack, or null if it could not be mapped.
  void* top() const {
    return base_ == nullptr ? nullptr : child_stack_pool::top(base_);
  }

private:
  child_stack_pool& pool_;
  char* base_;
};

// ---- one attempt ----------------------------------------------------------

class process_handle;

struct attempt {
  std::uint64_t id = 0;
  std::string argv0;
  std::string attempt_dir;
  std::string artifacts_dir;
  attempt_callbacks cb;
  /// The handle start() returned, told when the attempt has been reported.
  std::weak_ptr<process_handle> handle;
  clock_type::time_point started;
  clock_type::time_point ended;

  pid_t pid = -1;
  int pidfd = -1;
  int output_fd = -1;
  std::optional<output_capture> capture;
  std::optional<detail::memory_cgroup> cgroup;

  /// Set when the attempt never ran: the outcome is known at start.
  bool spawn_failed = false;
  int preset_exit_code = 0;
  std::string failure_line;
  std::string infrastructure_error;

  bool exited = false;
  int wait_status = 0;
  /// Set when, after the leader was reaped, a signal to the process group
  /// found no process in it (not even a zombie): none is left to reap or
  /// wait for, and none can join it.
  bool group_empty = false;
  bool eof = false;
  std::optional<clock_type::time_point> kill_at;
  std::optional<clock_type::time_point> drain_until;
  std::optional<clock_type::time_point> group_until;

  ~attempt() {
    close_fd(pidfd);
    close_fd(output_fd);
  }
};

using attempt_ptr = std::unique_ptr<attempt>;

// ---- the reactor ----------------------------------------------------------

class reactor : public std::enable_shared_from_this<reactor> {
public:
  explicit reactor(process_runtime_options options)
    : options_(std::move(options)) {}

  ~reactor() {
    close_fd(epoll_fd_);
    close_fd(wake_fd_);
    close_fd(devnull_fd_);
  }

  /// Sets up descriptors and starts the thread; on failure every attempt
  /// reports `init_error_`.
  void init() {
    raise_fd_limit();
    if (options_.child_subreaper) {
      if (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
        subreaper_ = true;
      else
        warn("process runtime: cannot become a child subreaper (" +
             errno_text(errno) +
             "); orphans of agents are left to init to reap");
    }
    for (auto& name : options_.inherited_env)
      if (auto* value = std::getenv(name.c_str()))
        base_env_.emplace(name, value);
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (std::strncmp(*e, "LC_", 3) == 0)
        if (auto* eq = std::strchr(*e, '='))
          base_env_.emplace(std::string(*e, eq), std::string(eq + 1));
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    devnull_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0 || devnull_fd_ < 0 ||
        !raise_fd(devnull_fd_)) {
      init_error_ =
        "process runtime: cannot set up its reactor: " + errno_text(errno);
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key(0, kind_wake);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
      init_error_ = "process runtime: cannot watch its wake-up descriptor: " +
                    errno_text(errno);
      return;
    }
    read_buf_.resize(64 * 1024);
    thread_running_ = true;
    thread_ = std::thread{[self = shared_from_this()] { self->run(); }};
  }

  /// Asks the thread to kill what runs, report it and end; joins unless
  /// called from the reactor thread itself.
  void shutdown() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      closing_ = true;
    }
    wake();
    if (!thread_.joinable())
      return;
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb);

  void post_stop(std::uint64_t id, std::chrono::milliseconds grace) {
    post(command{command::stop, id, grace, nullptr});
  }

  void post_kill(std::uint64_t id) {
    post(command{command::kill, id, {}, nullptr});
  }

  void warn(std::string_view message) {
    std::lock_guard<std::mutex> guard{warn_mtx_};
    if (options_.on_warning) {
      try {
        options_.on_warning(message);
      } catch (...) {
        // A failing warning sink must not take the reactor down.
      }
    }
  }

private:
  struct command {
    enum kind_t { add, stop, kill } kind;
    std::uint64_t id;
    std::chrono::milliseconds grace;
    attempt_ptr item;
  };

  using deadline = std::pair<clock_type::time_point, std::uint64_t>;

  void raise_fd_limit() {
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

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
  }

  // Returns false when the reactor no longer accepts work.
  bool post(command cmd) {
    bool wake_needed = false;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (closing_ || !thread_running_)
        return false;
      commands_.push_back(std::move(cmd));
      wake_needed = !std::exchange(wake_pending_, true);
    }
    if (wake_needed)
      wake();
    return true;
  }

  std::shared_ptr<attempt_handle> submit(attempt_ptr item);
  std::shared_ptr<attempt_handle> finish_unposted(attempt_ptr item);
  int watch(attempt& a);

  const detail::memory_controller* memory_controller() {
    std::lock_guard<std::mutex> guard{cgroup_mtx_};
    if (!cgroup_probed_) {
      cgroup_probed_ = true;
      auto ctrl = detail::find_memory_controller(options_.cgroup_name);
      if (ctrl)
        controller_ = *ctrl;
      else
        warn("process runtime: memory limits are not enforced and OOM kills "
             "are not detected: " +
             ctrl.error().to_string());
    }
    return controller_ ? &*controller_ : nullptr;
  }

  void deliver_sync(attempt_callbacks& cb, attempt_outcome out) {
    if (cb.on_exit) {
      try {
        cb.on_exit(std::move(out));
      } catch (...) {
        warn("process runtime: an on_exit callback threw");
      }
    }
  }

  void run();
  void handle_commands();
  void add_attempt(attempt_ptr a);
  void abandon(attempt& a, std::string error);
  void on_leader_exit(attempt& a);
  void read_output(attempt& a);
  void close_output(attempt& a);
  bool group_gone(attempt& a);
  void advance(attempt& a);
  void finalize(attempt& a);
  void signal_group(attempt& a, int sig);
  void schedule(clock_type::time_point at, std::uint64_t id) {
    deadlines_.emplace(at, id);
  }
  void retry_cgroup_removals(bool final_pass);

  process_runtime_options options_;
  std::map<std::string, std::string> base_env_;
  std::string init_error_;
  bool subreaper_ = false;
  int max_fd_ = 1024;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int devnull_fd_ = -1;
  std::thread thread_;
  std::atomic<std::uint64_t> next_id_{1};

  std::mutex mtx_;
  bool closing_ = false;
  bool thread_running_ = false;
  std::vector<command> commands_;
  /// The wake-up descriptor was written for commands the reactor has not
  /// taken yet: posting more needs no other write.
  bool wake_pending_ = false;

  child_stack_pool stacks_;
  std::mutex warn_mtx_;
  std::mutex cgroup_mtx_;
  bool cgroup_probed_ = false;
  std::optional<detail::memory_controller> controller_;

  // Reactor thread only.
  std::unordered_map<std::uint64_t, attempt_ptr> attempts_;
  std::priority_queue<deadline, std::vector<deadline>, std::greater<>>
    deadlines_;
  std::vector<std::pair<detail::memory_cgroup, clock_type::time_point>>
    stale_cgroups_;
  std::vector<char> read_buf_;
  std::optional<clock_type::time_point> shutdown_deadline_;
};

class process_handle : public attempt_handle {
public:
  process_handle(std::weak_ptr<reactor> r, std::uint64_t id, std::string pid)
    : reactor_(std::move(r)), id_(id), pid_(std::move(pid)) {}

  // After the attempt was reported there is nothing to stop, and asking
  // the reactor would wake it for nothing (a container worker kills its
  // attempt whenever it ends).
  void stop(std::chrono::milliseconds grace) override {
    if (ended_.load(std::memory_order_acquire))
      return;
    if (auto r = reactor_.lock())
      r->post_stop(id_, grace);
  }

  void kill() override {
    if (ended_.load(std::memory_order_acquire))
      return;
    if (auto r = reactor_.lock())
      r->post_kill(id_);
  }

  std::string id() const override { return pid_; }

  /// The attempt has been reported: stop() and kill() do nothing from now.
  void mark_ended() { ended_.store(true, std::memory_order_release); }

private:
  std::weak_ptr<reactor> reactor_;
  std::uint64_t id_;
  std::string pid_;
  std::atomic<bool> ended_{false};
};

// Empties `dir` if it exists and creates it (with parents); returns the error.
// A new attempt's directory usually does not exist yet: then one mkdir is
// all it takes.
std::string fresh_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0777) == 0)
    return {};
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec)
    return "cannot clear " + dir + ": " + ec.message();
  fs::create_directories(dir, ec);
  if (ec)
    return "cannot create " + dir + ": " + ec.message();
  return {};
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
  return 0;
}

void reactor::abandon(attempt& a, std::string error) {
  signal_group(a, SIGKILL);
  while (::waitpid(a.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  a.pid = -1;
  close_fd(a.pidfd);
  close_fd(a.output_fd);
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
    spec.attempt_dir + "/output.log", [self, on_line](std::string_view line) {
      if (!on_line)
        return;
      try {
        on_line(line);
      } catch (...) {
        self->warn("process runtime: an on_line callback threw");
      }
    });
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

  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return submit(fail("cannot create the output pipe: " + errno_text(errno)));
  a->output_fd = out_pipe[0];
  plan.output_fd = out_pipe[1];
  if (!raise_fd(plan.output_fd) ||
      (plan.cgroup_fd >= 0 && plan.cgroup_fd < 3) ||
      ::fcntl(a->output_fd, F_SETFL, O_NONBLOCK) != 0) {
    auto err = errno;
    close_fd(plan.output_fd);
    close_fd(a->output_fd);
    return submit(fail("cannot prepare descriptors: " + errno_text(err)));
  }
  sigemptyset(&plan.mask);
  child_stack stack{stacks_};
  if (stack.top() == nullptr) {
    auto err = errno;
    close_fd(plan.output_fd);
    close_fd(a->output_fd);
    return submit(fail("cannot map a stack for the child: " + errno_text(err)));
  }

  int pidfd = -1;
  pid_t pid;
  int spawn_err;
  {
    // Blocked across the clone so no handler of the program runs in the
    // child (on its stack, in our memory) before it has reset them.
    all_signals_blocked blocked;
    a->started = clock_type::now();
    pid =
      ::clone(child_main, stack.top(),
              CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &plan, &pidfd);
    spawn_err = errno;
  }
  // The child has exec'd or exited by now (CLONE_VFORK).
  close_fd(plan.output_fd);
  if (a->cgroup)
    a->cgroup->close_procs_fd();
  if (pid < 0) {
    close_fd(a->output_fd);
    return submit(
      fail("cannot start a process: clone failed: " + errno_text(spawn_err)));
  }

  if (plan.failed_stage != 0) {
    // The child could not exec and has exited; reap it here.
    close_fd(pidfd);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close_fd(a->output_fd);
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
      else if (kind == kind_output && a.output_fd >= 0)
        read_output(a);
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
      for (auto& [id, a] : attempts_)
        if (!a->exited)
          signal_group(*a, SIGKILL);
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
    if (it == attempts_.end() || it->second->exited)
      continue;
    auto& a = *it->second;
    if (cmd.kind == command::kill || cmd.grace.count() <= 0) {
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

void reactor::read_output(attempt& a) {
  std::size_t total = 0;
  while (total < max_read_per_turn) {
    auto n = ::read(a.output_fd, read_buf_.data(), read_buf_.size());
    if (n > 0) {
      a.capture->feed({read_buf_.data(), static_cast<std::size_t>(n)});
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    // EOF (or a broken pipe, which means the same here).
    close_output(a);
    advance(a);
    return;
  }
}

void reactor::close_output(attempt& a) {
  if (a.output_fd >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, a.output_fd, nullptr);
    close_fd(a.output_fd);
  }
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

// ---- the runtime object ---------------------------------------------------

class process_runtime : public container_runtime {
public:
  explicit process_runtime(process_runtime_options options)
    : reactor_(std::make_shared<reactor>(std::move(options))) {
    reactor_->init();
  }

  ~process_runtime() override { reactor_->shutdown(); }

  std::string_view name() const noexcept override { return "process"; }

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb) override {
    return reactor_->start(std::move(spec), std::move(cb));
  }

private:
  std::shared_ptr<reactor> reactor_;
};

} // namespace

std::shared_ptr<container_runtime>
make_process_runtime(process_runtime_options options) {
  return std::make_shared<process_runtime>(std::move(options));
}

} // namespace tasksup::runtime

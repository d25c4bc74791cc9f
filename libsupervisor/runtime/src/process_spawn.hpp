#pragma once

// The spawn side of the process runtime: preparing and starting one child
// (clone with CLONE_VM | CLONE_VFORK, like posix_spawn), and the directory
// helpers an attempt needs before it starts. Private to the runtime.

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <csignal>
#include <sys/mman.h>
#include <sys/types.h>

namespace tasksup::runtime::detail {

/// strerror(err) as a string.
std::string errno_text(int err);

/// Closes `fd` if open and sets it to -1.
void close_fd(int& fd) noexcept;

/// Moves `fd` to a number >= 3 (close-on-exec), so that setting up the
/// child's stdin/stdout/stderr cannot overwrite it.
bool raise_fd(int& fd);

/// The step of starting the child that failed.
enum child_stage : int {
  stage_cgroup = 1,
  stage_setpgid,
  stage_stdio,
  stage_chdir,
  stage_exec,
};

/// Words for a `child_stage`.
const char* stage_text(int stage);

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
  int error_fd = -1;
  /// Given to the child as descriptor 3 when set (the shim's status pipe).
  int extra_fd = -1;
  int cgroup_fd = -1;
  int max_fd = 1024;
  /// The signal mask to give the agent.
  sigset_t mask;
  /// The signals whose disposition the child resets to the default; empty:
  /// every signal (the caller does not know which it changed).
  std::vector<int> reset_only;
  /// A caller with no signal handlers (the shim: signals reach it through a
  /// signalfd) need not block them across the clone.
  bool caller_has_handlers = true;
  /// Whether the spawn asks the kernel for a pidfd.
  bool want_pidfd = true;
  /// Written by the child (shared memory) when it cannot exec: the stage
  /// that failed (0: none) and its errno.
  int failed_stage = 0;
  int failed_err = 0;
};

/// Sets `plan`'s argv (pointing into `args`, which must outlive the spawn),
/// its environment (`env`, "NAME=value" each) and the program to execute
/// (`args[0]`, not looked up in PATH).
void set_command(child_plan& plan, std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env);

/// Size of the child's stack; it runs a handful of system calls only.
constexpr std::size_t child_stack_size = 64 * 1024;

/// The kernel's struct sigaction (glibc's differs in layout); zeroed, it
/// sets SIG_DFL.

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

/// A started child, or why not.
struct spawn_result {
  /// The child's pid; -1 when clone failed (then `err` says why).
  pid_t pid = -1;
  /// Its pidfd (close-on-exec), -1 when the kernel gave none.
  int pidfd = -1;
  int err = 0;
};

/// Starts the child described by `plan` on `stack_top` and returns once it
/// has exec'd or exited (CLONE_VFORK). When it could not exec,
/// `plan.failed_stage` and `plan.failed_err` say where and why.
spawn_result spawn_child(child_plan& plan, void* stack_top);

/// Empties `dir` if it exists and creates it (with parents) private, mode
/// 0700; returns the error, empty on success.
std::string fresh_dir(const std::string& dir);

/// True if `dir` is a directory holding nothing; false if it holds anything
/// or cannot be read.
bool empty_dir(const std::string& dir);

/// The tasksup-shim program: `configured` when set, else $TASKSUP_SHIM,
/// else next to the running program, else the build tree's or the install
/// prefix's; empty when none exists. `looked` lists where it looked.
std::string find_shim(const std::string& configured, std::string& looked);

/// The paths execvp would try for `argv0` with `path_var` as PATH.
std::vector<std::string> exec_candidates(const std::string& argv0,
                                         const std::string& path_var);

} // namespace tasksup::runtime::detail

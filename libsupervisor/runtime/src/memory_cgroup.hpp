#pragma once

#include "tasksup/supervisor/expected.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace tasksup::runtime::detail {

/// A small cgroup (or /proc) file, whole; empty when it cannot be read.
std::string read_cgroup_file(const std::string& path);

/// Which cgroup hierarchy holds the memory controller.
enum class cgroup_version { v1, v2 };

/// Where per-attempt memory cgroups are created: a directory with the memory
/// controller, below which the supervisor may create children.
struct memory_controller {
  cgroup_version version = cgroup_version::v1;
  /// e.g. /sys/fs/cgroup/memory/<own cgroup>/tasksup.
  std::string parent_dir;
  /// The hierarchy's mount point, e.g. /sys/fs/cgroup/memory.
  std::string mount;
};

/// Finds a writable memory controller (cgroup v1 at /sys/fs/cgroup/memory,
/// or v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified with "memory" in
/// cgroup.controllers) and creates `<own cgroup>/<name>` in it. The error
/// says why limits cannot be enforced.
expected<memory_controller> find_memory_controller(const std::string& name);

/// One attempt's memory cgroup; removed by `remove`, not by the destructor,
/// because removal must wait until its processes are gone.
class memory_cgroup {
public:
  /// Creates `<parent_dir>/<name>` with the limit (v1: memory.limit_in_bytes
  /// and memory.memsw.limit_in_bytes when present; v2: memory.max and
  /// memory.swap.max=0) and opens its cgroup.procs for the child to join.
  static expected<memory_cgroup> create(const memory_controller& ctrl,
                                        const std::string& name,
                                        std::uint64_t limit_bytes);

  /// An existing cgroup directory (one another process created, e.g. the
  /// node before it restarted): its version is told by its files.
  static memory_cgroup existing(const std::string& path);

  memory_cgroup(memory_cgroup&& other) noexcept;

  memory_cgroup& operator=(memory_cgroup&& other) noexcept;

  memory_cgroup(const memory_cgroup&) = delete;

  memory_cgroup& operator=(const memory_cgroup&) = delete;

  ~memory_cgroup();

  /// The cgroup directory.
  const std::string& path() const noexcept { return path_; }

  /// A write-only, close-on-exec descriptor of cgroup.procs: a child writes
  /// "0" to it to move itself in before exec.
  int procs_fd() const noexcept { return procs_fd_; }

  /// Closes `procs_fd` (the parent's copy, once the child has started).
  void close_procs_fd() noexcept;

  /// True when the kernel OOM-killed a process in this cgroup.
  bool oom_killed() const;

  /// The count of memory event `key` (v1: memory.oom_control, e.g.
  /// "oom_kill"; v2: memory.events, e.g. "oom", "oom_kill"); 0 when absent.
  std::uint64_t memory_event(std::string_view key) const;

  /// The pids currently in the cgroup.
  std::vector<pid_t> pids() const;

  /// SIGKILLs every process in the cgroup.
  void kill_all() const;

  /// Removes the directory; false while processes remain (try again later).
  bool remove() const;

private:
  memory_cgroup(cgroup_version version, std::string path, int procs_fd);

  cgroup_version version_;
  std::string path_;
  int procs_fd_ = -1;
};

} // namespace tasksup::runtime::detail

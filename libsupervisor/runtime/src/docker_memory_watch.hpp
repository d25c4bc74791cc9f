#pragma once

#include "memory_cgroup.hpp"

#include "tasksup/supervisor/expected.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tasksup::runtime::detail {

/// Where the Docker runtime keeps its containers' memory limits itself: a
/// cgroup of its own (`<own memory cgroup>/tasksup-docker`) that the engine
/// can use as a container's CgroupParent.
///
/// Why: the engine learns of an OOM kill from a watch that containerd's shim
/// sets on the container's cgroup after the container started, so a program
/// that exceeds its limit within its first milliseconds is reported as a
/// plain SIGKILL. With the limit on a parent cgroup that exists (and is
/// watched) before the container starts, the kernel tells tasksup itself.
struct docker_memory_home {
  memory_controller ctrl;
  /// `ctrl.parent_dir` as the engine names it: relative to the hierarchy's
  /// mount point, starting with '/'.
  std::string relative;
};

/// Whether the engine on `socket_path` puts containers in this host's cgroup
/// tree the way tasksup can use: the engine's process is visible and shares
/// this process's cgroup namespace (SO_PEERCRED on its socket), it uses the
/// cgroupfs driver (`cgroup_driver` from GET /info; the systemd driver takes
/// slices only), and a writable memory controller of the engine's cgroup
/// version (`cgroup_version`, "1" or "2") is found. The error says which
/// condition failed.
expected<docker_memory_home>
find_docker_memory_home(const std::string& socket_path,
                        std::string_view cgroup_driver,
                        std::string_view cgroup_version);

/// One container's parent cgroup, holding its memory limit.
class docker_memory_watch {
public:
  /// Creates `<home>/<name>` with the limit (no swap) and, on cgroup v1,
  /// registers an eventfd for OOM notifications on it before the container
  /// exists.
  static expected<docker_memory_watch> create(const docker_memory_home& home,
                                              const std::string& name,
                                              std::uint64_t limit_bytes);

  /// The cgroup of a container another instance started (adoption): watched
  /// from now on; none when `<home>/<name>` does not exist.
  static std::optional<docker_memory_watch>
  existing(const docker_memory_home& home, const std::string& name);

  docker_memory_watch(docker_memory_watch&& other) noexcept;

  docker_memory_watch& operator=(docker_memory_watch&& other) noexcept;

  docker_memory_watch(const docker_memory_watch&) = delete;

  docker_memory_watch& operator=(const docker_memory_watch&) = delete;

  ~docker_memory_watch();

  /// HostConfig.CgroupParent for the container.
  std::string cgroup_parent() const;

  /// True when the kernel hit the limit and killed a process below it
  /// (v1: the OOM notification fired; v2: memory.events counts an OOM kill).
  bool oom_killed() const;

  /// Removes the cgroup, and on cgroup v1 the same path in the other
  /// hierarchies, where the engine created it for the container's other
  /// controllers; call once the container is removed.
  void remove() const;

private:
  docker_memory_watch(const docker_memory_home& home, std::string name,
                      memory_cgroup cg, int event_fd);

  cgroup_version version_;
  std::string relative_;
  std::string name_;
  memory_cgroup cg_;
  int event_fd_ = -1;
  std::string mount_;
  /// The v1 notification, once read.
  mutable bool fired_ = false;
};

/// Removes the cgroups `docker_memory_watch` made for container `name`
/// (a container reaped after its owner died). Busy or missing ones are left.
void remove_docker_memory_dirs(const docker_memory_home& home,
                               const std::string& name);

} // namespace tasksup::runtime::detail

#pragma once

// Reaping: nothing of an attempt outlives it. The process runtime's reaper
// waits for an ended attempt's process group and memory cgroup to vanish,
// removes the cgroup (retrying one that is still busy), and kills what
// attempts of an earlier run of the node left behind (`reap`). Private to
// the runtime.

#include "memory_cgroup.hpp"
#include "tasksup/runtime/runtime.hpp"

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::runtime::detail {

struct attempt;
class warning_sink;

class attempt_reaper {
public:
  /// Memory cgroups are made below `cgroup_name` (see
  /// `process_runtime_options::cgroup_name`).
  attempt_reaper(std::string cgroup_name, warning_sink& warn)
    : cgroup_name_(std::move(cgroup_name)), warn_(warn) {}

  /// Becomes the child subreaper, so the orphans of agents are ours to reap
  /// (warns when it cannot).
  void become_subreaper();

  /// The memory controller attempts' cgroups are made under, probed once
  /// (any thread); null when memory limits cannot be enforced.
  const detail::memory_controller* memory_controller();

  /// The memory cgroup named in a shim record, when it is one this runtime
  /// would have made (`name`: the attempt's, empty when not known).
  std::optional<detail::memory_cgroup> recorded_cgroup(const std::string& path,
                                                       const std::string& name);

  /// Reactor thread: true once nothing is left of the ended attempt's
  /// process group and cgroup (what is left is killed and reaped).
  bool group_gone(attempt& a);

  /// Reactor thread: removes an ended attempt's cgroup, or keeps it to
  /// retry for a while when it is still busy.
  void release(detail::memory_cgroup cgroup);

  /// Reactor thread: cgroups whose removal is retried.
  bool has_stale() const { return !stale_cgroups_.empty(); }

  /// Reactor thread: retries the removals; the last pass gives up on what
  /// is left (warning of each).
  void retry_removals(bool final_pass);

  /// Kills what attempts of an earlier run left under `spec.attempt_root`.
  reap_report reap(const reap_spec& spec);

private:
  std::string cgroup_name_;
  warning_sink& warn_;
  bool subreaper_ = false;

  std::mutex cgroup_mtx_;
  bool cgroup_probed_ = false;
  std::optional<detail::memory_controller> controller_;

  // Reactor thread only.
  std::vector<
    std::pair<detail::memory_cgroup, std::chrono::steady_clock::time_point>>
    stale_cgroups_;
};

} // namespace tasksup::runtime::detail

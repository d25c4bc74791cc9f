#include "attempt_reaper.hpp"

#include "attempt.hpp"

#include <cerrno>
#include <csignal>
#include <filesystem>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace fs = std::filesystem;

void attempt_reaper::become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    subreaper_ = true;
  else
    warn_("process runtime: cannot become a child subreaper (" +
          errno_text(errno) + "); orphans of agents are left to init to reap");
}

const detail::memory_controller* attempt_reaper::memory_controller() {
  std::lock_guard<std::mutex> guard{cgroup_mtx_};
  if (!cgroup_probed_) {
    cgroup_probed_ = true;
    auto ctrl = detail::find_memory_controller(cgroup_name_);
    if (ctrl)
      controller_ = *ctrl;
    else
      warn_("process runtime: memory limits are not enforced and OOM kills "
            "are not detected: " +
            ctrl.error().to_string());
  }
  return controller_ ? &*controller_ : nullptr;
}

std::optional<memory_cgroup>
attempt_reaper::recorded_cgroup(const std::string& path,
                                const std::string& name) {
  // Only a directory this runtime would have made: right below its own
  // parent, and (when known) named for the attempt.
  auto* ctrl = memory_controller();
  if (ctrl == nullptr)
    return std::nullopt;
  auto prefix = ctrl->parent_dir + "/";
  if (path.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  auto base = path.substr(prefix.size());
  if (base.empty() || base.find('/') != std::string::npos || base == "." ||
      base == ".." || (!name.empty() && base != name))
    return std::nullopt;
  return memory_cgroup::existing(path);
}

bool attempt_reaper::group_gone(attempt& a) {
  // The shim waited for the agent's group to vanish before it exited; the
  // shim's own group held only the shim.
  if (a.pid <= 0 || a.adopted)
    a.group_empty = true;
  if (a.pid <= 0 && !a.cgroup)
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

void attempt_reaper::release(detail::memory_cgroup cgroup) {
  if (!cgroup.remove())
    stale_cgroups_.emplace_back(std::move(cgroup),
                                clock_type::now() + std::chrono::seconds{10});
}

void attempt_reaper::retry_removals(bool final_pass) {
  auto now = clock_type::now();
  auto& v = stale_cgroups_;
  for (auto it = v.begin(); it != v.end();) {
    it->first.kill_all();
    for (auto pid : it->first.pids())
      ::waitpid(pid, nullptr, WNOHANG);
    if (it->first.remove()) {
      it = v.erase(it);
    } else if (final_pass || now >= it->second) {
      warn_("process runtime: cannot remove cgroup " + it->first.path() + ": " +
            errno_text(errno));
      it = v.erase(it);
    } else {
      ++it;
    }
  }
}

reap_report attempt_reaper::reap(const reap_spec& spec) {
  reap_report report;
  if (spec.attempt_root.empty())
    return report;
  auto root = shim_dir_of(spec.attempt_root);
  std::error_code ec;
  fs::recursive_directory_iterator it{
    root, fs::directory_options::skip_permission_denied, ec};
  if (ec) {
    if (ec != std::errc::no_such_file_or_directory)
      report.errors.push_back(root + ": " + ec.message());
    return report;
  }
  for (; !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    if (it.depth() >= 2) {
      it.disable_recursion_pending();
    }
    if (it->path().filename() != shim_record_name)
      continue;
    std::error_code sec;
    if (it->symlink_status(sec).type() != fs::file_type::regular)
      continue;
    auto dir = it->path().parent_path().string();
    if (fs::exists(dir + "/" + std::string{exit_record_name}, sec))
      continue; // ended; nothing runs
    auto path = it->path().string();
    auto text = read_small_file(path);
    if (!text) {
      report.errors.push_back(text.error().to_string());
      continue;
    }
    auto rec = parse_shim_record(*text, path);
    if (!rec) {
      report.errors.push_back(rec.error().to_string());
      continue;
    }
    if (spec.keep.count(dir) != 0 ||
        spec.keep.count(std::to_string(rec->agent_pid)) != 0)
      continue;
    std::string how;
    if (is_shim_of(rec->shim_pid, rec->shim_start, dir)) {
      int fd = pidfd_open(rec->shim_pid);
      if (fd >= 0 && is_shim_of(rec->shim_pid, rec->shim_start, dir) &&
          pidfd_signal(fd, SIGUSR1) == 0)
        how = "asked its shim (pid " + std::to_string(rec->shim_pid) +
              ") to kill process group " + std::to_string(rec->agent_pgid);
      if (fd >= 0)
        ::close(fd);
    }
    auto killed = kill_group_members(rec->agent_pgid, rec->agent_start, dir);
    if (killed > 0)
      how += (how.empty() ? "" : "; ") + std::string{"killed "} +
             std::to_string(killed) + " processes of group " +
             std::to_string(rec->agent_pgid);
    // The cgroup only of an attempt shown to be one.
    if (!how.empty() && !rec->cgroup.empty())
      if (auto cg = recorded_cgroup(rec->cgroup, {}))
        cg->kill_all();
    if (!how.empty())
      report.reaped.push_back(dir + ": " + how);
  }
  return report;
}

} // namespace tasksup::runtime::detail

#include "docker_memory_watch.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace {

namespace fs = std::filesystem;

constexpr const char* home_name = "tasksup-docker";

error home_error(std::string what) {
  return error{"docker memory watch", "", std::move(what)};
}

/// The pid of the process serving `socket_path` (0: not visible here).
expected<pid_t> engine_pid(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path))
    return home_error(socket_path + ": socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return home_error(std::string{"socket: "} + std::strerror(errno));
  ucred cred{};
  socklen_t len = sizeof(cred);
  std::string err;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0)
    err = socket_path + ": " + std::strerror(errno);
  else if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    err = std::string{"SO_PEERCRED: "} + std::strerror(errno);
  ::close(fd);
  if (!err.empty())
    return home_error(std::move(err));
  return cred.pid;
}

std::string cgroup_namespace(const std::string& pid) {
  std::error_code ec;
  auto target = fs::read_symlink("/proc/" + pid + "/ns/cgroup", ec);
  return ec ? std::string{} : target.string();
}

/// The other v1 hierarchies' mount points (cpu, pids, ...), where the engine
/// creates a container's cgroup path for its other controllers.
std::vector<std::string> other_v1_mounts(const std::string& memory_mount) {
  std::vector<std::string> out;
  auto root = fs::path{memory_mount}.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it{root, ec};
       !ec && it != fs::directory_iterator{}; it.increment(ec)) {
    auto path = it->path().string();
    if (path == memory_mount || it->path().filename() == "unified")
      continue;
    std::error_code sec;
    // "cpu" is often a link to "cpu,cpuacct": the directory once is enough.
    if (it->is_symlink(sec) || !it->is_directory(sec))
      continue;
    out.push_back(std::move(path));
  }
  return out;
}

void remove_dirs(cgroup_version version, const std::string& mount,
                 const std::string& relative, const std::string& name) {
  if (version != cgroup_version::v1)
    return;
  for (auto& m : other_v1_mounts(mount))
    ::rmdir((m + relative + "/" + name).c_str());
}

/// Registers an eventfd for OOM notifications of the v1 cgroup `dir`;
/// returns it, or -1.
int watch_v1_oom(const std::string& dir) {
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0)
    return -1;
  int ofd = ::open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC);
  int cfd =
    ::open((dir + "/cgroup.event_control").c_str(), O_WRONLY | O_CLOEXEC);
  bool ok = false;
  if (ofd >= 0 && cfd >= 0) {
    auto line = std::to_string(efd) + " " + std::to_string(ofd);
    ok = ::write(cfd, line.data(), line.size()) ==
         static_cast<ssize_t>(line.size());
  }
  // The registration holds what it needs; the descriptors may go.
  if (ofd >= 0)
    ::close(ofd);
  if (cfd >= 0)
    ::close(cfd);
  if (!ok) {
    ::close(efd);
    return -1;
  }
  return efd;
}

} // namespace

expected<docker_memory_home>
find_docker_memory_home(const std::string& socket_path,
                        std::string_view cgroup_driver,
                        std::string_view cgroup_version) {
  if (cgroup_driver != "cgroupfs")
    return home_error("the engine's cgroup driver is '" +
                      std::string{cgroup_driver} +
                      "' (only cgroupfs takes a cgroup path as parent)");
  auto pid = engine_pid(socket_path);
  if (!pid)
    return pid.error();
  if (*pid <= 0)
    return home_error("the engine's process is not visible from here");
  auto theirs = cgroup_namespace(std::to_string(*pid));
  auto ours = cgroup_namespace("self");
  if (theirs.empty() || ours.empty())
    return home_error("cannot read the engine's cgroup namespace");
  if (theirs != ours)
    return home_error("the engine runs in another cgroup namespace");
  auto ctrl = find_memory_controller(home_name);
  if (!ctrl)
    return ctrl.error();
  auto version = ctrl->version == cgroup_version::v1 ? "1" : "2";
  if (cgroup_version != version)
    return home_error("the engine uses cgroup v" + std::string{cgroup_version} +
                      ", the memory controller here is v" + version);
  if (ctrl->version == cgroup_version::v1 &&
      read_cgroup_file(ctrl->parent_dir + "/memory.use_hierarchy")
          .substr(0, 1) != "1")
    return home_error(ctrl->parent_dir +
                      ": memory.use_hierarchy is off, a parent's limit would "
                      "not hold for the container");
  auto& dir = ctrl->parent_dir;
  if (dir.compare(0, ctrl->mount.size(), ctrl->mount) != 0)
    return home_error(dir + " is not below " + ctrl->mount);
  docker_memory_home home;
  home.relative = dir.substr(ctrl->mount.size());
  if (home.relative.empty() || home.relative.front() != '/')
    return home_error(dir + ": unexpected cgroup path");
  home.ctrl = std::move(*ctrl);
  return home;
}

expected<docker_memory_watch>
docker_memory_watch::create(const docker_memory_home& home,
                            const std::string& name,
                            std::uint64_t limit_bytes) {
  auto cg = memory_cgroup::create(home.ctrl, name, limit_bytes);
  if (!cg)
    return cg.error();
  // Nothing joins it through cgroup.procs: the engine creates the
  // container's cgroup below it.
  cg->close_procs_fd();
  int efd = -1;
  if (home.ctrl.version == cgroup_version::v1) {
    efd = watch_v1_oom(cg->path());
    if (efd < 0) {
      auto why = std::string{"cannot watch OOM kills: "} + std::strerror(errno);
      cg->remove();
      return error{cg->path(), "", why};
    }
  }
  return docker_memory_watch{home, name, std::move(*cg), efd};
}

std::optional<docker_memory_watch>
docker_memory_watch::existing(const docker_memory_home& home,
                              const std::string& name) {
  auto dir = home.ctrl.parent_dir + "/" + name;
  std::error_code ec;
  if (name.empty() || name.find('/') != std::string::npos ||
      !fs::is_directory(dir, ec))
    return std::nullopt;
  int efd = -1;
  if (home.ctrl.version == cgroup_version::v1)
    efd = watch_v1_oom(dir);
  return docker_memory_watch{home, name, memory_cgroup::existing(dir), efd};
}

docker_memory_watch::docker_memory_watch(const docker_memory_home& home,
                                         std::string name, memory_cgroup cg,
                                         int event_fd)
  : version_(home.ctrl.version), relative_(home.relative),
    name_(std::move(name)), cg_(std::move(cg)), event_fd_(event_fd),
    mount_(home.ctrl.mount) {}

docker_memory_watch::docker_memory_watch(docker_memory_watch&& other) noexcept
  : version_(other.version_), relative_(std::move(other.relative_)),
    name_(std::move(other.name_)), cg_(std::move(other.cg_)),
    event_fd_(std::exchange(other.event_fd_, -1)),
    mount_(std::move(other.mount_)), fired_(other.fired_) {}

docker_memory_watch&
docker_memory_watch::operator=(docker_memory_watch&& other) noexcept {
  if (this != &other) {
    if (event_fd_ >= 0)
      ::close(event_fd_);
    version_ = other.version_;
    relative_ = std::move(other.relative_);
    name_ = std::move(other.name_);
    cg_ = std::move(other.cg_);
    event_fd_ = std::exchange(other.event_fd_, -1);
    mount_ = std::move(other.mount_);
    fired_ = other.fired_;
  }
  return *this;
}

docker_memory_watch::~docker_memory_watch() {
  if (event_fd_ >= 0)
    ::close(event_fd_);
}

std::string docker_memory_watch::cgroup_parent() const {
  return relative_ + "/" + name_;
}

bool docker_memory_watch::oom_killed() const {
  if (version_ == cgroup_version::v2)
    // Counted up the tree unless the hierarchy keeps events local; "oom"
    // counts where the limit was hit, which is here.
    return cg_.memory_event("oom_kill") > 0 || cg_.memory_event("oom") > 0;
  if (!fired_ && event_fd_ >= 0) {
    // Read once: the eventfd also fires when the cgroup is removed.
    eventfd_t count = 0;
    fired_ = ::eventfd_read(event_fd_, &count) == 0 && count > 0;
  }
  return fired_;
}

void docker_memory_watch::remove() const {
  remove_dirs(version_, mount_, relative_, name_);
  cg_.remove();
}

void remove_docker_memory_dirs(const docker_memory_home& home,
                               const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." ||
      name == "..")
    return;
  remove_dirs(home.ctrl.version, home.ctrl.mount, home.relative, name);
  ::rmdir((home.ctrl.parent_dir + "/" + name).c_str());
}

} // namespace tasksup::runtime::detail

#include "memory_cgroup.hpp"

#include "tasksup/runtime/detail/shim_record.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tasksup::runtime::detail {

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Writes `text` with one write(2), as cgroup files expect; returns the error
// text, empty on success.
std::string write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return path + ": " + std::strerror(errno);
  auto n = ::write(fd, text.data(), text.size());
  auto err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return path + ": " + std::strerror(n < 0 ? err : EIO);
  return {};
}

bool has_word(const std::string& text, std::string_view word) {
  std::istringstream in{text};
  std::string w;
  while (in >> w)
    if (w == word)
      return true;
  return false;
}

// Our own cgroup path in the v1 memory hierarchy and in the v2 hierarchy,
// from /proc/self/cgroup ("id:controllers:path" lines).
struct own_cgroups {
  std::string v1_memory;
  std::string v2;
  bool has_v1_memory = false;
  bool has_v2 = false;
};

own_cgroups read_own_cgroups() {
  own_cgroups out;
  std::ifstream in{"/proc/self/cgroup"};
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos)
      continue;
    auto controllers = line.substr(a + 1, b - a - 1);
    auto path = line.substr(b + 1);
    if (path == "/")
      path.clear();
    if (controllers.empty()) {
      out.has_v2 = true;
      out.v2 = path;
      continue;
    }
    std::istringstream names{controllers};
    std::string name;
    while (std::getline(names, name, ','))
      if (name == "memory") {
        out.has_v1_memory = true;
        out.v1_memory = path;
      }
  }
  return out;
}

// Creates `dir` (an existing one is fine); returns the error text.
std::string make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return "cannot create " + dir + ": " + std::strerror(errno);
  return {};
}

expected<memory_controller> try_v1(const own_cgroups& own,
                                   const std::string& name) {
  const std::string mount = "/sys/fs/cgroup/memory";
  if (!exists(mount + "/memory.limit_in_bytes"))
    return error{mount, "", "no cgroup v1 memory controller mounted"};
  std::string reasons;
  // Below our own cgroup first, so the supervisor's own limits still apply;
  // the hierarchy root as a fallback.
  std::vector<std::string> bases{mount + own.v1_memory};
  if (!own.v1_memory.empty())
    bases.push_back(mount);
  for (auto& base : bases) {
    auto dir = base + "/" + name;
    auto err = make_dir(dir);
    if (err.empty() && !exists(dir + "/memory.limit_in_bytes"))
      err = dir + " has no memory.limit_in_bytes";
    if (err.empty() && ::access(dir.c_str(), W_OK) != 0)
      err = dir + " is not writable";
    if (err.empty())
      return memory_controller{cgroup_version::v1, dir, mount};
    reasons += (reasons.empty() ? "" : "; ") + err;
  }
  return error{mount, "", reasons};
}

expected<memory_controller> try_v2(const own_cgroups& own,
                                   const std::string& name) {
  std::string reasons;
  for (std::string mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (!exists(mount + "/cgroup.controllers"))
      continue;
    if (!has_word(read_cgroup_file(mount + "/cgroup.controllers"), "memory")) {
      reasons += (reasons.empty() ? "" : "; ") + mount +
                 ": memory controller not enabled";
      continue;
    }
    std::vector<std::string> bases{mount + own.v2};
    if (!own.v2.empty())
      bases.push_back(mount);
    for (auto& base : bases) {
      // A v2 cgroup hands a controller to its children only when it is in
      // its cgroup.subtree_control, on every level down to the attempt.
      std::string err;
      auto sub = base + "/cgroup.subtree_control";
      if (!has_word(read_cgroup_file(sub), "memory"))
        err = write_file(sub, "+memory");
      auto dir = base + "/" + name;
      if (err.empty())
        err = make_dir(dir);
      if (err.empty() &&
          !has_word(read_cgroup_file(dir + "/cgroup.subtree_control"),
                    "memory"))
        err = write_file(dir + "/cgroup.subtree_control", "+memory");
      if (err.empty())
        return memory_controller{cgroup_version::v2, dir, mount};
      reasons += (reasons.empty() ? "" : "; ") + err;
    }
  }
  if (reasons.empty())
    reasons = "no cgroup v2 hierarchy with a memory controller";
  return error{"cgroup v2", "", reasons};
}

} // namespace

std::string read_cgroup_file(const std::string& path) {
  // Cgroup files are small; cgroup.procs of a cgroup with a great many
  // processes is the largest.
  auto text = read_small_file(path, 1 << 20);
  return text ? std::move(*text) : std::string{};
}

expected<memory_controller> find_memory_controller(const std::string& name) {
  auto own = read_own_cgroups();
  std::string reasons;
  if (own.has_v1_memory) {
    auto v1 = try_v1(own, name);
    if (v1)
      return v1;
    reasons = v1.error().to_string();
  }
  auto v2 = try_v2(own, name);
  if (v2)
    return v2;
  if (!reasons.empty())
    reasons += "; ";
  reasons += v2.error().to_string();
  return error{"memory cgroup", "", reasons};
}

expected<memory_cgroup> memory_cgroup::create(const memory_controller& ctrl,
                                              const std::string& name,
                                              std::uint64_t limit_bytes) {
  auto dir = ctrl.parent_dir + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    // A leftover from a supervisor that died mid-attempt: reuse the name
    // once it is empty.
    if (errno != EEXIST || ::rmdir(dir.c_str()) != 0 ||
        ::mkdir(dir.c_str(), 0755) != 0)
      return error{
        dir, "", std::string{"cannot create cgroup: "} + std::strerror(errno)};
  }
  auto limit = std::to_string(limit_bytes);
  std::string err;
  if (ctrl.version == cgroup_version::v1) {
    err = write_file(dir + "/memory.limit_in_bytes", limit);
    // Without swap accounting the limit still holds for RAM; with it, swap
    // must not become a way around the limit.
    if (err.empty() && exists(dir + "/memory.memsw.limit_in_bytes"))
      err = write_file(dir + "/memory.memsw.limit_in_bytes", limit);
  } else {
    err = write_file(dir + "/memory.max", limit);
    if (err.empty() && exists(dir + "/memory.swap.max"))
      err = write_file(dir + "/memory.swap.max", "0");
  }
  int fd = -1;
  if (err.empty()) {
    auto procs = dir + "/cgroup.procs";
    fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      err = procs + ": " + std::strerror(errno);
  }
  if (!err.empty()) {
    ::rmdir(dir.c_str());
    return error{dir, "", "cannot set memory limit: " + err};
  }
  return memory_cgroup{ctrl.version, std::move(dir), fd};
}

memory_cgroup::memory_cgroup(cgroup_version version, std::string path,
                             int procs_fd)
  : version_(version), path_(std::move(path)), procs_fd_(procs_fd) {}

memory_cgroup::memory_cgroup(memory_cgroup&& other) noexcept
  : version_(other.version_), path_(std::move(other.path_)),
    procs_fd_(std::exchange(other.procs_fd_, -1)) {}

memory_cgroup& memory_cgroup::operator=(memory_cgroup&& other) noexcept {
  if (this != &other) {
    close_procs_fd();
    version_ = other.version_;
    path_ = std::move(other.path_);
    procs_fd_ = std::exchange(other.procs_fd_, -1);
  }
  return *this;
}

memory_cgroup::~memory_cgroup() {
  close_procs_fd();
}

void memory_cgroup::close_procs_fd() noexcept {
  if (procs_fd_ >= 0) {
    ::close(procs_fd_);
    procs_fd_ = -1;
  }
}

memory_cgroup memory_cgroup::existing(const std::string& path) {
  auto version =
    exists(path + "/memory.events") ? cgroup_version::v2 : cgroup_version::v1;
  return memory_cgroup{version, path, -1};
}

bool memory_cgroup::oom_killed() const {
  return memory_event("oom_kill") > 0;
}

std::uint64_t memory_cgroup::memory_event(std::string_view key) const {
  auto file =
    version_ == cgroup_version::v1 ? "/memory.oom_control" : "/memory.events";
  std::istringstream in{read_cgroup_file(path_ + file)};
  std::string name;
  std::uint64_t value = 0;
  while (in >> name >> value)
    if (name == key)
      return value;
  return 0;
}

std::vector<pid_t> memory_cgroup::pids() const {
  std::vector<pid_t> out;
  std::istringstream in{read_cgroup_file(path_ + "/cgroup.procs")};
  long pid = 0;
  while (in >> pid)
    out.push_back(static_cast<pid_t>(pid));
  return out;
}

void memory_cgroup::kill_all() const {
  if (version_ == cgroup_version::v2 && exists(path_ + "/cgroup.kill"))
    write_file(path_ + "/cgroup.kill", "1");
  for (auto pid : pids())
    if (pid > 0)
      ::kill(pid, SIGKILL);
}

bool memory_cgroup::remove() const {
  return ::rmdir(path_.c_str()) == 0 || errno == ENOENT;
}

} // namespace tasksup::runtime::detail

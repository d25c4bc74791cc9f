#include "state_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tasksup::journal::detail {

expected<bool> make_state_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      return tasksup::error{
        dir, "", "cannot create the state directory: " + ec.message()};
    ::chmod(dir.c_str(), 0700);
  } else if (!fs::is_directory(dir, ec)) {
    return tasksup::error{dir, "", "the state directory is not a directory"};
  }
  return true;
}

state_dir_lock::~state_dir_lock() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<bool> state_dir_lock::take(const std::string& dir) {
  auto lock_path = dir + "/lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)
    return tasksup::error{lock_path, "",
                          std::string{"cannot open the state directory's "
                                      "lock: "} +
                            std::strerror(errno)};
  // One an older node left may be 0644: it names the node's pid only, but
  // nothing in the directory is for other users.
  ::fchmod(fd_, 0600);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {};
    auto n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    std::string holder =
      n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string{"unknown"};
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' '))
      holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    return tasksup::error{dir, "",
                          "the state directory is in use by another tasksup "
                          "node (pid " +
                            holder + ")"};
  }
  auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0)
    (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
  return true;
}

expected<bool> claim_state_dir(const std::string& dir, state_dir_lock& lock) {
  if (auto ok = make_state_dir(dir); !ok)
    return ok;
  return lock.take(dir);
}

} // namespace tasksup::journal::detail

#include "state_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tasksup::app {

std::string absolute_dir(const std::string& dir) {
  if (dir.empty())
    return dir;
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  return ec ? dir : abs.lexically_normal().string();
}

std::string default_state_dir() {
  if (auto* dir = std::getenv("TASKSUP_STATE_DIR"); dir && *dir != '\0')
    return dir;
  if (auto* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/')
    return std::string{xdg} + "/tasksup";
  if (::geteuid() == 0)
    return "/var/lib/tasksup";
  if (auto* home = std::getenv("HOME"); home && *home == '/')
    return std::string{home} + "/.local/state/tasksup";
  return (std::filesystem::temp_directory_path() / "tasksup" / "state")
    .string();
}

namespace {

std::string octal(unsigned mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", mode);
  return text;
}

} // namespace

expected<std::optional<unsigned>>
make_state_dir_private(const std::string& dir) {
  auto fail = [&](std::string what) {
    return tasksup::error{dir, {}, std::move(what)};
  };
  if (dir.empty())
    return fail("no state directory given");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return fail(std::string{"cannot read the state directory: "} +
                  std::strerror(errno));
    std::error_code ec;
    auto parent = std::filesystem::path{dir}.parent_path();
    if (!parent.empty())
      std::filesystem::create_directories(parent, ec);
    if (ec)
      return fail("cannot create the state directory: " + ec.message());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(std::string{"cannot create the state directory: "} +
                  std::strerror(errno));
    // Another process may have made it first: check it as an existing one.
    if (::stat(dir.c_str(), &st) != 0)
      return fail(std::string{"cannot read the state directory: "} +
                  std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    return fail("the state directory is not a directory");
  auto mode = static_cast<unsigned>(st.st_mode & 07777);
  if ((mode & 077) == 0)
    return std::optional<unsigned>{};
  // The journal and attempt output hold task secrets: refuse rather than
  // keep them where other users can read them.
  auto refuse = [&](const std::string& why) {
    return fail("the state directory is open to other users (mode " +
                octal(mode) + ") and cannot be made private: " + why +
                ". As its owner, run chmod 700 " + dir +
                ", or pass --state-dir a directory of your own");
  };
  if (st.st_uid != ::geteuid())
    return refuse("it belongs to uid " + std::to_string(st.st_uid) +
                  ", not to this user (uid " + std::to_string(::geteuid()) +
                  ")");
  if (::chmod(dir.c_str(), 0700) != 0)
    return refuse(std::strerror(errno));
  return std::optional<unsigned>{mode};
}

} // namespace tasksup::app

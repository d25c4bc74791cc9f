#include "state_dir.hpp"

#include <unistd.h>

#include <cstdlib>
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

} // namespace tasksup::app

#include "config_location.hpp"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace tasksup::app {

std::optional<std::string> resolve_config_dir(const std::string& flag) {
  if (!flag.empty())
    return flag;
  if (const char* env = std::getenv("TASKSUP_CONFIG_DIR"); env && *env)
    return std::string{env};
  std::error_code ec;
  if (std::filesystem::is_directory("config", ec))
    return std::string{"config"};
  if (std::filesystem::is_directory(TASKSUP_SOURCE_CONFIG_DIR, ec))
    return std::string{TASKSUP_SOURCE_CONFIG_DIR};
  return std::nullopt;
}

} // namespace tasksup::app

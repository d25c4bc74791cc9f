#include "tasksup/runtime/private_files.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace tasksup::runtime {

std::string make_private_dirs(const std::string& dir) {
  auto path = dir;
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  if (path.empty() || path == "/")
    return {};
  if (::mkdir(path.c_str(), private_dir_mode) == 0)
    return {};
  // Only a missing parent is worth a second try; the usual case (the
  // parent exists) costs one mkdir.
  if (errno == ENOENT) {
    auto slash = path.find_last_of('/');
    if (slash != std::string::npos && slash > 0)
      if (auto err = make_private_dirs(path.substr(0, slash)); !err.empty())
        return err;
    if (::mkdir(path.c_str(), private_dir_mode) == 0)
      return {};
  }
  auto saved = errno;
  struct stat st {};
  if (saved == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return {};
  if (saved == EEXIST)
    return "cannot create " + path + ": it exists and is not a directory";
  return "cannot create " + path + ": " + std::strerror(saved);
}

} // namespace tasksup::runtime

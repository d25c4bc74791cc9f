#pragma once

// A scratch directory for one test, removed with everything in it at scope
// exit. Shared by the unit, actor and app tests.

#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace tasksup::test {

struct temp_dir {
  std::string path;

  /// `<tmp>/tasksup-<kind>-XXXXXX`, created.
  explicit temp_dir(const std::string& kind = "test") {
    std::string tmpl =
      (std::filesystem::temp_directory_path() / ("tasksup-" + kind + "-XXXXXX"))
        .string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

/// The permission bits of `path`, which must exist.
inline unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// Sets (or, with nullptr, unsets) an environment variable for one scope.
struct scoped_env {
  std::string name;
  std::optional<std::string> old;
  scoped_env(const char* n, const char* value) : name(n) {
    if (auto* v = std::getenv(n))
      old = v;
    if (value != nullptr)
      ::setenv(n, value, 1);
    else
      ::unsetenv(n);
  }
  ~scoped_env() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

} // namespace tasksup::test

#include "tasksup/runtime/private_files.hpp"

#include "tasksup/runtime/output_capture.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <string>

using namespace tasksup::runtime;
using tasksup::test::mode_of;
using tasksup::test::temp_dir;

namespace {

/// No umask for the length of a test: the modes must be asked for.
struct no_umask {
  mode_t old = ::umask(0);
  ~no_umask() { ::umask(old); }
};

} // namespace

TEST_CASE("make_private_dirs creates the directory and missing parents "
          "0700 and leaves existing ones alone") {
  temp_dir tmp{"private"};
  no_umask guard;
  REQUIRE(::chmod(tmp.path.c_str(), 0755) == 0);
  auto dir = tmp.path + "/run/task/attempt-1/";
  CHECK(make_private_dirs(dir) == "");
  CHECK(mode_of(tmp.path) == 0755);
  CHECK(mode_of(tmp.path + "/run") == 0700);
  CHECK(mode_of(tmp.path + "/run/task") == 0700);
  CHECK(mode_of(tmp.path + "/run/task/attempt-1") == 0700);
  // Again: nothing to do, no error.
  CHECK(make_private_dirs(dir) == "");
}

TEST_CASE("make_private_dirs names a file in the way") {
  temp_dir tmp{"private"};
  std::ofstream{tmp.path + "/file"} << "x";
  auto err = make_private_dirs(tmp.path + "/file/sub");
  CHECK(err.find(tmp.path + "/file") != std::string::npos);
  err = make_private_dirs(tmp.path + "/file");
  CHECK(err.find("not a directory") != std::string::npos);
}

TEST_CASE("an output log is created 0600 whatever the umask") {
  temp_dir tmp{"private"};
  no_umask guard;
  auto created = output_capture::create(tmp.path + "/output.log", {});
  REQUIRE(created);
  CHECK(mode_of(tmp.path + "/output.log") == 0600);
  auto appended = output_capture::append_to(tmp.path + "/more.log", {});
  REQUIRE(appended);
  CHECK(mode_of(tmp.path + "/more.log") == 0600);
}

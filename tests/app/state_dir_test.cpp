#include "state_dir.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

using namespace tasksup::app;
using tasksup::test::mode_of;
using tasksup::test::temp_dir;

TEST_CASE("a missing state directory is created 0700, its parents too") {
  temp_dir tmp{"state"};
  auto dir = tmp.path + "/a/b/state";
  auto r = make_state_dir_private(dir);
  REQUIRE(r);
  CHECK(*r == std::nullopt);
  CHECK(mode_of(dir) == 0700);
}

TEST_CASE("a private state directory is left as it is") {
  temp_dir tmp{"state"};
  REQUIRE(::chmod(tmp.path.c_str(), 0700) == 0);
  auto r = make_state_dir_private(tmp.path);
  REQUIRE(r);
  CHECK(*r == std::nullopt);
  CHECK(mode_of(tmp.path) == 0700);
}

TEST_CASE("a state directory others can use is tightened to 0700 and its "
          "old mode reported") {
  temp_dir tmp{"state"};
  for (unsigned mode : {0755u, 0750u, 0711u, 0701u, 02770u}) {
    INFO(mode);
    REQUIRE(::chmod(tmp.path.c_str(), mode) == 0);
    auto r = make_state_dir_private(tmp.path);
    REQUIRE(r);
    CHECK(*r == std::optional<unsigned>{mode});
    CHECK(mode_of(tmp.path) == 0700);
  }
}

TEST_CASE("a state directory that is a file is refused") {
  temp_dir tmp{"state"};
  auto file = tmp.path + "/state";
  std::ofstream{file} << "x";
  auto r = make_state_dir_private(file);
  REQUIRE_FALSE(r);
  CHECK(r.error().where == file);
  CHECK(r.error().what.find("not a directory") != std::string::npos);
}

TEST_CASE("another user's open state directory is refused with what to do") {
  if (::geteuid() != 0) {
    WARN("skipped: giving a directory to another user needs root");
    return;
  }
  temp_dir tmp{"state"};
  auto dir = tmp.path + "/theirs";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
  auto r = make_state_dir_private(dir);
  REQUIRE_FALSE(r);
  auto text = r.error().to_string();
  CHECK(text.find(dir) != std::string::npos);
  CHECK(text.find("mode 0755") != std::string::npos);
  CHECK(text.find("uid 65534") != std::string::npos);
  CHECK(text.find("chmod 700 " + dir) != std::string::npos);
  CHECK(text.find("--state-dir") != std::string::npos);
  // Left as it was: only its owner changes it.
  CHECK(mode_of(dir) == 0755);
}

#include "tasksup/runtime/runtime.hpp"

#include <catch2/catch.hpp>

using tasksup::runtime::member_state_dir;

TEST_CASE("a task's state directory sits beside its attempt directories") {
  CHECK(member_state_dir("/var/lib/tasksup/attempts", "fix-login") ==
        "/var/lib/tasksup/attempts/fix-login/state");
  CHECK(member_state_dir("/var/lib/tasksup/attempts/", "fix-login") ==
        "/var/lib/tasksup/attempts/fix-login/state");
  CHECK(member_state_dir("w", "t") == "w/t/state");
}

TEST_CASE("a task's state directory is a function of the root and the task "
          "alone, so a restarted node finds the same one") {
  CHECK(member_state_dir("/r", "loop") == member_state_dir("/r", "loop"));
  CHECK(member_state_dir("/r", "loop") != member_state_dir("/r", "loop2"));
}

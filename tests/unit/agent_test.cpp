#include "tasksup/supervisor/agent.hpp"

#include <catch2/catch.hpp>

using namespace tasksup;

TEST_CASE("agent specs are equal only when every field is") {
  agent_spec a;
  a.agent_id = "claude";
  a.agent_cli = "claude";
  a.config_dir = "/home/u/.claude";
  a.cli_flags = "-p --verbose";
  a.args = {"-p", "--verbose"};
  auto b = a;
  CHECK(a == b);
  CHECK_FALSE(a != b);
  SECTION("id") {
    b.agent_id = "claude-2";
  }
  SECTION("command") {
    b.agent_cli = "/usr/bin/claude";
  }
  SECTION("config directory") {
    b.config_dir.clear();
  }
  SECTION("flags as written") {
    b.cli_flags = "-p  --verbose";
  }
  SECTION("split arguments") {
    b.args.pop_back();
  }
  SECTION("prompt delivery") {
    b.prompt_as_argument = false;
  }
  CHECK(a != b);
  CHECK_FALSE(a == b);
}

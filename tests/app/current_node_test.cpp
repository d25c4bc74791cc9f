#include "current_node.hpp"

#include "state_dir.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

using namespace tasksup::app;

namespace {

using tasksup::test::mode_of;
using tasksup::test::scoped_env;
using tasksup::test::temp_dir;

/// A user who set nothing but their config and state homes (in `dir`).
struct plain_user {
  scoped_env config;
  scoped_env state;
  scoped_env node{"TASKSUP_NODE", nullptr};
  scoped_env state_dir{"TASKSUP_STATE_DIR", nullptr};
  scoped_env certs{"TASKSUP_CERTS", nullptr};
  explicit plain_user(const temp_dir& dir)
    : config("XDG_CONFIG_HOME", (dir.path + "/config").c_str()),
      state("XDG_STATE_HOME", (dir.path + "/state").c_str()) {}
};

} // namespace

TEST_CASE("current node: recorded 0600 in the config home, read back, and "
          "cleared only while it names the same node") {
  temp_dir dir{"current"};
  plain_user user{dir};
  CHECK(current_node_path() == dir.path + "/config/tasksup/current-node");
  CHECK_FALSE(read_current_node());
  current_node a{"127.0.0.1:7500", "/srv/a", ""};
  REQUIRE(write_current_node(a));
  CHECK(mode_of(current_node_path()) == 0600);
  CHECK(mode_of(dir.path + "/config/tasksup") == 0700);
  auto back = read_current_node();
  REQUIRE(back);
  CHECK(back->node == "127.0.0.1:7500");
  CHECK(back->state_dir == "/srv/a");
  CHECK(back->certs_dir.empty());
  // Another node started since: the first one's stop leaves it alone.
  current_node b{"127.0.0.1:7501", "/srv/b", "/srv/b-certs"};
  REQUIRE(write_current_node(b));
  CHECK_FALSE(clear_current_node(a));
  REQUIRE(read_current_node());
  CHECK(read_current_node()->certs_dir == "/srv/b-certs");
  CHECK(clear_current_node(b));
  CHECK_FALSE(read_current_node());
  CHECK_FALSE(clear_current_node());
  // A file tasksup did not write is no current node.
  std::ofstream{current_node_path()} << "{\"node\":\"nonsense\"}";
  CHECK_FALSE(read_current_node());
  // Without $XDG_CONFIG_HOME: ~/.config.
  scoped_env no_xdg{"XDG_CONFIG_HOME", nullptr};
  scoped_env home{"HOME", "/home/u"};
  CHECK(current_node_path() == "/home/u/.config/tasksup/current-node");
}

TEST_CASE("current node: flags, then the environment, then the current "
          "node, then the defaults") {
  temp_dir dir{"current"};
  plain_user user{dir};
  auto defaults = resolve_node_target("", "");
  CHECK(defaults.node == "127.0.0.1:7420");
  CHECK(defaults.node_source == "the default");
  CHECK(defaults.state_dir == dir.path + "/state/tasksup");
  CHECK(defaults.state_dir_source == "the default");
  CHECK(defaults.certs_dir == dir.path + "/state/tasksup/certs");

  REQUIRE(write_current_node({"127.0.0.1:7500", "/srv/own", ""}));
  auto current = resolve_node_target("", "");
  CHECK(current.node == "127.0.0.1:7500");
  CHECK(current.node_source == "the current node");
  CHECK(current.state_dir == "/srv/own");
  CHECK(current.state_dir_source == "the current node");
  CHECK(current.certs_dir == "/srv/own/certs");
  // --node naming the current node, spelled the same: still its directory.
  CHECK(resolve_node_target("127.0.0.1:7500", "").state_dir == "/srv/own");
  // Another node: the current node's certificates are not its.
  auto other = resolve_node_target("127.0.0.1:7600", "");
  CHECK(other.node_source == "--node");
  CHECK(other.state_dir == dir.path + "/state/tasksup");
  CHECK(other.state_dir_source == "the default");

  {
    scoped_env env_node{"TASKSUP_NODE", "127.0.0.1:7700"};
    scoped_env env_dir{"TASKSUP_STATE_DIR", "/env/state"};
    auto env = resolve_node_target("", "");
    CHECK(env.node == "127.0.0.1:7700");
    CHECK(env.node_source == "$TASKSUP_NODE");
    CHECK(env.state_dir == "/env/state");
    CHECK(env.state_dir_source == "$TASKSUP_STATE_DIR");
    auto flags = resolve_node_target("127.0.0.1:7800", "/flag/state");
    CHECK(flags.node == "127.0.0.1:7800");
    CHECK(flags.state_dir == "/flag/state");
    CHECK(flags.state_dir_source == "--state-dir");
    CHECK(flags.certs_dir == "/flag/state/certs");
  }
  // A node started with --certs: its commands use that directory.
  REQUIRE(write_current_node({"127.0.0.1:7500", "/srv/own", "/srv/certs"}));
  CHECK(resolve_node_target("", "").certs_dir == "/srv/certs");
  CHECK(resolve_node_target("", "/x").certs_dir == "/x/certs");
}

TEST_CASE("current node: a node listening on every address is reached on "
          "loopback") {
  CHECK(client_address_for("0.0.0.0", 7420) == "127.0.0.1:7420");
  CHECK(client_address_for("::", 7420) == "[::1]:7420");
  CHECK(client_address_for("127.0.0.2", 9) == "127.0.0.2:9");
}

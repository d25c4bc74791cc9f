#include "tls_credentials.hpp"

#include "certs.hpp"
#include "current_node.hpp"
#include "node_setup.hpp"
#include "tls_server_context.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

using namespace tasksup::app;

namespace {

using tasksup::test::scoped_env;
using tasksup::test::temp_dir;

/// Where a command given `--certs flag` (and no other flag) finds its
/// certificates.
std::string client_certs_dir(const std::string& flag) {
  return tasksup::app::client_certs_dir(flag,
                                        resolve_node_target("", "").certs_dir);
}

} // namespace

TEST_CASE("a command finds its certificates: --certs, else $TASKSUP_CERTS, "
          "else the state dir's") {
  temp_dir config{"config"};
  // No current node recorded: the environment and the defaults.
  scoped_env config_home{"XDG_CONFIG_HOME", config.path.c_str()};
  scoped_env certs{"TASKSUP_CERTS", nullptr};
  scoped_env state{"TASKSUP_STATE_DIR", "/srv/tasksup-state"};
  CHECK(client_certs_dir("/flag/dir") == "/flag/dir");
  CHECK(client_certs_dir("") == "/srv/tasksup-state/certs");
  {
    scoped_env set{"TASKSUP_CERTS", "/env/certs"};
    CHECK(client_certs_dir("") == "/env/certs");
    CHECK(client_certs_dir("/flag/dir") == "/flag/dir");
  }
  {
    // An empty variable counts as unset.
    scoped_env empty{"TASKSUP_CERTS", ""};
    CHECK(client_certs_dir("") == "/srv/tasksup-state/certs");
  }
  // Without $TASKSUP_STATE_DIR, the rule `tasksup serve` follows.
  scoped_env no_state{"TASKSUP_STATE_DIR", nullptr};
  scoped_env xdg{"XDG_STATE_HOME", "/home/u/.state"};
  CHECK(client_certs_dir("") == "/home/u/.state/tasksup/certs");
  CHECK(default_state_dir() == "/home/u/.state/tasksup");
  // A worker joining a coordinator: the node's files, found like a
  // command's.
  auto join = joining_credentials("", false);
  CHECK_FALSE(join.insecure);
  CHECK(join.certificate_file == "/home/u/.state/tasksup/certs/node.crt");
  CHECK(join.key_file == "/home/u/.state/tasksup/certs/node.key");
  CHECK(join.ca_file == "/home/u/.state/tasksup/certs/ca.crt");
  CHECK(joining_credentials("/c", false).key_file == "/c/node.key");
  CHECK(joining_credentials("/c", true).insecure);
  // A node: --certs, else <state dir>/certs.
  CHECK(node_certs_dir("", "/var/lib/x") == "/var/lib/x/certs");
  CHECK(node_certs_dir("/c", "/var/lib/x") == "/c");
}

TEST_CASE("credentials that cannot be used are reported with the file "
          "before anything connects") {
  temp_dir tmp;
  auto dir = tmp.path + "/certs";
  REQUIRE(init_certs(dir, {}));
  auto good = client_credentials_in(dir);
  CHECK_FALSE(check_credentials(good));
  CHECK_FALSE(check_credentials(insecure_credentials()));

  SECTION("a missing file") {
    auto creds = client_credentials_in(tmp.path + "/nowhere");
    auto err = check_credentials(creds);
    REQUIRE(err);
    CHECK(err->where == tmp.path + "/nowhere/ca.crt");
    CHECK(err->what.find("No such file") != std::string::npos);
  }
  SECTION("a file that is not a certificate") {
    std::ofstream{dir + "/client.crt", std::ios::trunc} << "not pem\n";
    auto err = check_credentials(good);
    REQUIRE(err);
    CHECK(err->where == dir + "/client.crt");
    CHECK(err->what.find("not a PEM certificate") != std::string::npos);
  }
  SECTION("a key that is not a key") {
    std::ofstream{dir + "/client.key", std::ios::trunc} << "garbage";
    auto err = check_credentials(good);
    REQUIRE(err);
    CHECK(err->where == dir + "/client.key");
  }
  SECTION("the node's key with the client's certificate") {
    auto creds = good;
    creds.key_file = dir + "/node.key";
    auto err = check_credentials(creds);
    REQUIRE(err);
    CHECK(err->where == dir + "/node.key");
  }
  SECTION("the server context loads a node's credentials and names a bad "
          "file") {
    CHECK(make_tls_server_context(node_credentials_in(dir)));
    auto missing = node_credentials_in(dir);
    missing.ca_file = dir + "/missing-ca.crt";
    auto ctx = make_tls_server_context(missing);
    REQUIRE_FALSE(ctx);
    CHECK(ctx.error().where == missing.ca_file);
  }
}

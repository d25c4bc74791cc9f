#include "node_address.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace tasksup::app;

TEST_CASE("node addresses parse as HOST:PORT, IPv6 in brackets") {
  auto v4 = parse_node_address("127.0.0.1:7420");
  REQUIRE(v4);
  CHECK(v4->host == "127.0.0.1");
  CHECK(v4->port == 7420);
  auto v6 = parse_node_address("[::1]:80");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->to_string() == "[::1]:80");
  auto name = parse_node_address("build-box.lan:1");
  REQUIRE(name);
  CHECK(name->to_string() == "build-box.lan:1");
}

TEST_CASE("bad node addresses are refused with what was expected") {
  for (auto text : {"", "127.0.0.1", ":7420", "host:", "host:http",
                    "host:65536", "host:0", "::1:80", "[::1]80", "host:12x"}) {
    INFO(text);
    auto r = parse_node_address(text);
    REQUIRE(!r);
    CHECK(r.error().to_string().find("HOST:PORT") != std::string::npos);
  }
  CHECK(parse_node_address("127.0.0.1:0", true));
}

TEST_CASE("only loopback hosts count as local") {
  for (auto host : {"localhost", "127.0.0.1", "127.8.9.10", "::1"})
    CHECK(is_loopback_host(host));
  for (auto host : {"0.0.0.0", "10.0.0.1", "::", "example.com", "128.0.0.1",
                    "localhost.example.com"})
    CHECK(!is_loopback_host(host));
}

TEST_CASE("the default node comes from TASKSUP_NODE, else loopback:7420") {
  ::unsetenv("TASKSUP_NODE");
  CHECK(default_node_text() == "127.0.0.1:7420");
  ::setenv("TASKSUP_NODE", "10.1.2.3:9000", 1);
  CHECK(default_node_text() == "10.1.2.3:9000");
  ::unsetenv("TASKSUP_NODE");
}

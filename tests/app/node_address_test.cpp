#include "node_address.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
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

TEST_CASE("a probe tells a port nobody listens on from a listening one") {
  using namespace std::chrono_literals;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  node_address at{"127.0.0.1", ntohs(addr.sin_port)};
  // Bound, not listening: refused, as a port with no node.
  CHECK(probe_listening(at, 2s) == listen_probe::nothing);
  REQUIRE(::listen(fd, 1) == 0);
  CHECK(probe_listening(at, 2s) == listen_probe::listening);
  ::close(fd);
  auto text = nothing_listening_text(at, "the default");
  CHECK(text.rfind("cannot reach the node at " + at.to_string() +
                     ": no tasksup node is listening there (start one with "
                     "`tasksup serve`",
                   0) == 0);
  CHECK(nothing_listening_text(at, "the current node")
          .find("tasksup context clear") != std::string::npos);
}

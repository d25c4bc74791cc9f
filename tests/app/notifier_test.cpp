// The notifier's pure parts: which URLs it accepts and its retry schedule.
// Delivery itself (a real command, a real HTTP server that fails first) is
// tested end to end in tests/integration/http_dashboard_test.cpp.

#include "notifier.hpp"

#include <catch2/catch.hpp>

using namespace tasksup::app;
using std::chrono::milliseconds;

TEST_CASE("notify URLs: http only, host, optional port and path") {
  auto u = parse_http_url("http://127.0.0.1:9000/hooks/tasksup?x=1");
  REQUIRE(u);
  CHECK(u->host == "127.0.0.1");
  CHECK(u->port == 9000);
  CHECK(u->path == "/hooks/tasksup?x=1");
  auto plain = parse_http_url("http://localhost");
  REQUIRE(plain);
  CHECK(plain->port == 80);
  CHECK(plain->path == "/");
  auto v6 = parse_http_url("http://[::1]:81/x");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == 81);
  for (auto bad :
       {"https://x/", "ftp://x", "http://", "http://:80/", "http://x:/",
        "http://x:0/", "http://x:65536/", "http://x:8a/", "http://u@x/",
        "http://[::1/", "http://x/a b"}) {
    INFO(bad);
    auto r = parse_http_url(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().to_string().find("--notify-url") == 0);
  }
}

TEST_CASE("notify retries double from the first delay up to the cap") {
  CHECK(notify_delay(1, milliseconds{1000}, milliseconds{30000}) ==
        milliseconds{1000});
  CHECK(notify_delay(2, milliseconds{1000}, milliseconds{30000}) ==
        milliseconds{2000});
  CHECK(notify_delay(4, milliseconds{1000}, milliseconds{30000}) ==
        milliseconds{8000});
  CHECK(notify_delay(6, milliseconds{1000}, milliseconds{30000}) ==
        milliseconds{30000});
  CHECK(notify_delay(1000, milliseconds{1000}, milliseconds{30000}) ==
        milliseconds{30000});
}

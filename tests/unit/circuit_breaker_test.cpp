#include "tasksup/supervisor/circuit_breaker.hpp"

#include <catch2/catch.hpp>

using namespace tasksup;

namespace {

circuit_breaker_config cfg() {
  circuit_breaker_config out;
  out.max_failures = 3;
  out.reset_timeout_s = 10;
  out.stale_after_s = 100;
  return out;
}

} // namespace

TEST_CASE("circuit breaker defaults match the spec") {
  circuit_breaker_config def;
  CHECK(def.max_failures == 5);
  CHECK(def.reset_timeout_s == 300);
  circuit_breaker br;
  for (int i = 0; i < 4; ++i)
    br.record_failure("a", i);
  CHECK(br.state("a", 4) == breaker_state::closed);
  br.record_failure("a", 4);
  CHECK(br.state("a", 4) == breaker_state::open);
  CHECK(br.state("a", 303.9) == breaker_state::open);
  CHECK(br.state("a", 304) == breaker_state::half_open);
}

TEST_CASE("circuit breaker goes closed, open, half-open, closed") {
  circuit_breaker br{cfg()};
  CHECK(br.allow("a", 0));
  CHECK(br.state("a", 0) == breaker_state::closed);
  br.record_failure("a", 1);
  br.record_failure("a", 2);
  CHECK(br.state("a", 2) == breaker_state::closed);
  CHECK(br.allow("a", 2));
  br.record_failure("a", 3);
  CHECK(br.state("a", 3) == breaker_state::open);
  CHECK_FALSE(br.allow("a", 3));
  CHECK_FALSE(br.allow("a", 12.9));
  CHECK(br.state("a", 13) == breaker_state::half_open);
  CHECK(br.allow("a", 13));         // the probe
  CHECK_FALSE(br.allow("a", 13.5)); // only one probe
  CHECK(br.state("a", 13.5) == breaker_state::half_open);
  br.record_success("a", 14);
  CHECK(br.state("a", 14) == breaker_state::closed);
  CHECK(br.allow("a", 14));
  SECTION("after closing, failures count from zero again") {
    br.record_failure("a", 15);
    br.record_failure("a", 16);
    CHECK(br.state("a", 16) == breaker_state::closed);
    br.record_failure("a", 17);
    CHECK(br.state("a", 17) == breaker_state::open);
  }
}

TEST_CASE("a failed half-open probe reopens the breaker from that moment") {
  circuit_breaker br{cfg()};
  for (int i = 0; i < 3; ++i)
    br.record_failure("a", 0);
  CHECK(br.allow("a", 10));
  br.record_failure("a", 15);
  CHECK(br.state("a", 15) == breaker_state::open);
  CHECK_FALSE(br.allow("a", 24.9));
  CHECK(br.state("a", 24.9) == breaker_state::open);
  CHECK(br.allow("a", 25));
}

TEST_CASE("a success resets the consecutive failure count") {
  circuit_breaker br{cfg()};
  br.record_failure("a", 0);
  br.record_failure("a", 1);
  br.record_success("a", 2);
  br.record_failure("a", 3);
  br.record_failure("a", 4);
  CHECK(br.state("a", 4) == breaker_state::closed);
  CHECK(br.allow("a", 4));
}

TEST_CASE("breakers of different agents are independent") {
  circuit_breaker br{cfg()};
  for (int i = 0; i < 3; ++i)
    br.record_failure("a", i);
  CHECK_FALSE(br.allow("a", 3));
  CHECK(br.allow("b", 3));
  CHECK(br.state("b", 3) == breaker_state::closed);
}

TEST_CASE("a probe that never reports does not block the agent forever") {
  circuit_breaker br{cfg()};
  for (int i = 0; i < 3; ++i)
    br.record_failure("a", 0);
  CHECK(br.allow("a", 10));
  CHECK_FALSE(br.allow("a", 19.9));
  CHECK(br.allow("a", 20));
  CHECK_FALSE(br.allow("a", 21));
}

TEST_CASE("state of agents no longer used is dropped") {
  circuit_breaker br{cfg()};
  br.record_failure("a", 0);
  br.record_failure("b", 50);
  CHECK(br.size() == 2);
  br.drop_stale(99.9);
  CHECK(br.size() == 2);
  br.drop_stale(100);
  CHECK(br.size() == 1);
  CHECK(br.state("b", 100) == breaker_state::closed);
  SECTION("allow counts as use") {
    CHECK(br.allow("b", 120));
    br.drop_stale(160);
    CHECK(br.size() == 1);
    br.drop_stale(220);
    CHECK(br.size() == 0);
  }
  SECTION("a dropped open breaker starts closed") {
    for (int i = 0; i < 3; ++i)
      br.record_failure("c", 100);
    CHECK(br.state("c", 100) == breaker_state::open);
    br.drop_stale(200);
    CHECK(br.size() == 0);
    CHECK(br.allow("c", 200));
  }
  SECTION("a success leaves nothing to remember") {
    br.record_success("b", 100);
    CHECK(br.size() == 0);
  }
}

TEST_CASE("breaker state names") {
  CHECK(to_string(breaker_state::closed) == "closed");
  CHECK(to_string(breaker_state::open) == "open");
  CHECK(to_string(breaker_state::half_open) == "half_open");
}

TEST_CASE("a circuit breaker's state survives save and restore") {
  circuit_breaker_config cfg;
  cfg.max_failures = 2;
  cfg.reset_timeout_s = 10;
  circuit_breaker a{cfg};
  a.record_failure("bad", 1);
  a.record_failure("bad", 2); // opens
  a.record_failure("flaky", 3);
  REQUIRE(a.state("bad", 3) == breaker_state::open);
  circuit_breaker b{cfg};
  b.restore(a.save());
  CHECK(b.state("bad", 3) == breaker_state::open);
  CHECK_FALSE(b.allow("bad", 5));
  CHECK(b.allow("bad", 13)); // reset timeout from the original opening
  // One more failure opens "flaky": its count came back too.
  b.record_failure("flaky", 4);
  CHECK(b.state("flaky", 4) == breaker_state::open);
  SECTION("malformed lines are skipped") {
    circuit_breaker c{cfg};
    c.restore("nokey\n\tx\t1\nbad\t-1\t0\t0\t0\nok\t0\t9\t0\t0\n" + a.save());
    CHECK(c.state("bad", 3) == breaker_state::open);
    CHECK(c.size() == 2);
  }
}

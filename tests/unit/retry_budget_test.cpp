#include "tasksup/supervisor/retry_budget.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace tasksup;

TEST_CASE("a default retry budget is unlimited") {
  retry_budget b;
  CHECK(b.unlimited());
  for (int i = 0; i < 10000; ++i)
    REQUIRE(b.try_take(0));
  CHECK(std::isinf(b.available(0)));
}

TEST_CASE("a retry budget hands out its tokens and then refuses") {
  retry_budget b{2, 0.5};
  CHECK_FALSE(b.unlimited());
  CHECK(b.available(0) == 2);
  CHECK(b.try_take(0));
  CHECK(b.try_take(0));
  CHECK_FALSE(b.try_take(0));
  CHECK(b.available(0) == 0);
  SECTION("tokens refill over time") {
    CHECK(b.available(1) == Approx(0.5));
    CHECK_FALSE(b.try_take(1));
    CHECK(b.try_take(2));
    CHECK_FALSE(b.try_take(2));
  }
  SECTION("refill stops at capacity") {
    CHECK(b.available(1000) == 2);
    CHECK(b.try_take(1000));
    CHECK(b.try_take(1000));
    CHECK_FALSE(b.try_take(1000));
  }
  SECTION("time going backwards refills nothing") {
    CHECK_FALSE(b.try_take(-100));
    CHECK(b.available(-50) == 0);
    CHECK(b.available(2) == Approx(1));
  }
}

TEST_CASE("a retry budget starts full at its first use") {
  retry_budget b{1, 1};
  CHECK(b.try_take(5000));
  CHECK_FALSE(b.try_take(5000));
  CHECK(b.try_take(5001));
}

TEST_CASE("a retry budget without refill or capacity") {
  retry_budget none{0, 10};
  CHECK_FALSE(none.try_take(0));
  CHECK_FALSE(none.try_take(100));
  retry_budget fixed{1, 0};
  CHECK(fixed.try_take(0));
  CHECK_FALSE(fixed.try_take(1e9));
  retry_budget bad{-3, std::nan("")};
  CHECK_FALSE(bad.try_take(0));
  CHECK(bad.available(10) == 0);
}

TEST_CASE("a retry budget's tokens survive save and restore") {
  retry_budget a{3, 1};
  REQUIRE(a.try_take(10));
  REQUIRE(a.try_take(10));
  retry_budget b{3, 1};
  b.restore(a.save());
  CHECK(b.available(10) == Approx(1));
  CHECK(b.available(11) == Approx(2));
  SECTION("malformed text changes nothing") {
    retry_budget c{3, 1};
    c.restore("garbage");
    c.restore("-5 0 1");
    CHECK(c.available(0) == 3);
  }
  SECTION("tokens beyond this budget's capacity are cut") {
    retry_budget small{0.5, 1};
    small.restore(retry_budget{3, 1}.save());
    CHECK(small.available(0) <= 0.5);
  }
}

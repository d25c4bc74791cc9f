#include "tasksup/supervisor/restart_window.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

using namespace tasksup;

TEST_CASE("restart window allows max_restarts per period") {
  restart_window w{3, 10};
  CHECK(w.try_restart(0));
  CHECK(w.try_restart(1));
  CHECK(w.try_restart(2));
  CHECK(w.count(2) == 3);
  CHECK_FALSE(w.try_restart(3));
  CHECK(w.count(3) == 3); // a denied restart is not recorded
  SECTION("a restart exactly one period ago still counts") {
    CHECK_FALSE(w.try_restart(10));
  }
  SECTION("once the oldest restart is older than the period, one more fits") {
    CHECK(w.try_restart(10.5));
    CHECK_FALSE(w.try_restart(10.75));
    CHECK(w.try_restart(11.5));
    CHECK(w.count(11.5) == 3);
  }
  SECTION("count forgets restarts outside the period") {
    CHECK(w.count(11) == 2);
    CHECK(w.count(12) == 1);
    CHECK(w.count(100) == 0);
  }
}

TEST_CASE("restart window says whether a restart is allowed without "
          "recording it") {
  restart_window w{2, 100};
  CHECK(w.allows(0));
  CHECK(w.count(0) == 0); // asking records nothing
  CHECK(w.try_restart(0));
  CHECK(w.try_restart(1));
  CHECK_FALSE(w.allows(2));
  CHECK(w.count(2) == 2);
  CHECK(w.allows(100.5)); // the restart at 0 fell out
  restart_window empty{0, 10};
  CHECK_FALSE(empty.allows(0));
}

TEST_CASE("restart window with no restarts allowed never allows one") {
  restart_window zero{0, 10};
  CHECK_FALSE(zero.try_restart(0));
  restart_window negative{-3, 10};
  CHECK_FALSE(negative.try_restart(0));
}

TEST_CASE("restart window defaults are 10 per hour") {
  restart_window w;
  CHECK(w.max_restarts() == 10);
  CHECK(w.period_s() == 3600);
  for (int i = 0; i < 10; ++i)
    CHECK(w.try_restart(i * 300.0));
  CHECK_FALSE(w.try_restart(3000));
  CHECK(w.try_restart(3600.5)); // the restart at 0 fell out
}

TEST_CASE("restart window keeps OTP's rule over a long sliding run") {
  // Against a direct model: every allowed restart time, and the rule
  // "at most max within [now - period, now]" recounted from scratch.
  restart_window w{5, 10};
  std::vector<double> allowed;
  std::uint64_t x = 7;
  double now = 0;
  for (int i = 0; i < 5000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    now += static_cast<double>((x >> 33) % 700) / 100.0; // 0–7 s apart
    auto in_window = [&](double t) { return t >= now - 10; };
    auto live = std::count_if(allowed.begin(), allowed.end(), in_window);
    bool expect = live < 5;
    INFO("restart " << i << " at " << now);
    REQUIRE(w.allows(now) == expect);
    // Some allowed restarts are only asked about, never recorded.
    bool record = (x >> 20) % 17 != 0;
    if (record)
      REQUIRE(w.try_restart(now) == expect);
    if (expect && record)
      allowed.push_back(now);
    REQUIRE(w.count(now) == static_cast<std::size_t>(std::count_if(
                              allowed.begin(), allowed.end(), in_window)));
  }
}

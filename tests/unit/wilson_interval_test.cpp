#include "tasksup/supervisor/wilson_interval.hpp"

#include <catch2/catch.hpp>

using namespace tasksup;

TEST_CASE("wilson lower bound: the published 95 % values") {
  CHECK(wilson_lower_bound(10, 10) == Approx(0.7225).margin(1e-4));
  CHECK(wilson_lower_bound(1, 1) == Approx(0.2065).margin(1e-4));
  CHECK(wilson_lower_bound(5, 10) == Approx(0.2366).margin(1e-4));
}

TEST_CASE("wilson lower bound: no trials and no successes give 0") {
  CHECK(wilson_lower_bound(0, 0) == 0);
  CHECK(wilson_lower_bound(0, -3) == 0);
  CHECK(wilson_lower_bound(0, 5) == 0);
  CHECK(wilson_lower_bound(0, 1000) == 0);
}

TEST_CASE("wilson lower bound: the same rate counts for more from more "
          "trials, and stays below the rate") {
  auto few = wilson_lower_bound(9, 10);
  auto many = wilson_lower_bound(90, 100);
  CHECK(few < many);
  CHECK(many < 0.9);
  CHECK(wilson_lower_bound(1, 1) < wilson_lower_bound(9, 10));
}

TEST_CASE("wilson lower bound: a wider interval for a larger z") {
  CHECK(wilson_lower_bound(8, 10, 2.576) < wilson_lower_bound(8, 10));
  CHECK(wilson_lower_bound(8, 10, 0) == Approx(0.8));
}

#include "tasksup/supervisor/backoff.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <vector>

using namespace tasksup;

namespace {

std::vector<double> schedule(const backoff_policy& pol, error_class cls,
                             int n) {
  backoff_rng rng{1};
  std::vector<double> out;
  for (int i = 0; i < n; ++i)
    out.push_back(pol.delay_s(i, cls, 0, rng));
  return out;
}

backoff_spec exponential(double initial, double mult, double max, jitter j) {
  backoff_spec s;
  s.kind = backoff_spec::kind_t::exponential;
  s.initial_s = initial;
  s.multiplier = mult;
  s.max_s = max;
  s.jit = j;
  return s;
}

} // namespace

TEST_CASE("standard backoff is 5, 15, 45 and then stays at 45") {
  backoff_policy pol;
  CHECK(schedule(pol, error_class::retryable, 6) ==
        std::vector<double>{5, 15, 45, 45, 45, 45});
  CHECK(schedule(pol, error_class::container_crash, 3) ==
        std::vector<double>{5, 15, 45});
  CHECK(schedule(pol, error_class::infrastructure, 3) ==
        std::vector<double>{5, 15, 45});
}

TEST_CASE("rate-limit backoff is 60, 120, 300 and then stays at 300") {
  backoff_policy pol;
  CHECK(schedule(pol, error_class::rate_limit, 5) ==
        std::vector<double>{60, 120, 300, 300, 300});
}

TEST_CASE("both schedules scale with their configured base") {
  backoff_policy pol{2.0, 10.0};
  CHECK(schedule(pol, error_class::retryable, 4) ==
        std::vector<double>{2, 6, 18, 18});
  CHECK(schedule(pol, error_class::rate_limit, 4) ==
        std::vector<double>{10, 20, 50, 50});
  CHECK(pol.spec(error_class::retryable).max_s == 18);
  CHECK(pol.spec(error_class::rate_limit).max_s == 50);
  CHECK(standard_backoff(5).table_s == std::vector<double>{5, 15, 45});
  CHECK(rate_limit_backoff(60).table_s == std::vector<double>{60, 120, 300});
}

TEST_CASE("a per-class override replaces only that class's schedule") {
  backoff_spec fixed;
  fixed.table_s = {1, 2};
  fixed.max_s = 100;
  backoff_policy pol{5.0, 60.0, {{error_class::infrastructure, fixed}}};
  CHECK(schedule(pol, error_class::infrastructure, 4) ==
        std::vector<double>{1, 2, 2, 2});
  CHECK(schedule(pol, error_class::retryable, 2) == std::vector<double>{5, 15});
}

TEST_CASE("exponential backoff grows by the multiplier up to max") {
  backoff_policy pol{
    5, 60, {{error_class::retryable, exponential(1, 2, 10, jitter::none)}}};
  CHECK(schedule(pol, error_class::retryable, 6) ==
        std::vector<double>{1, 2, 4, 8, 10, 10});
  backoff_rng rng{7};
  SECTION("huge retry counts saturate at max instead of overflowing") {
    CHECK(pol.delay_s(INT_MAX, error_class::retryable, 0, rng) == 10);
    CHECK(pol.delay_s(100000, error_class::retryable, 0, rng) == 10);
  }
  SECTION("negative retry counts count as the first retry") {
    CHECK(pol.delay_s(-4, error_class::retryable, 0, rng) == 1);
  }
}

TEST_CASE("delays are never negative and never above max") {
  backoff_rng rng{3};
  SECTION("negative table entries become 0") {
    backoff_spec s;
    s.table_s = {-5, 100};
    s.max_s = 50;
    backoff_policy pol{5, 60, {{error_class::retryable, s}}};
    CHECK(pol.delay_s(0, error_class::retryable, 0, rng) == 0);
    CHECK(pol.delay_s(1, error_class::retryable, 0, rng) == 50);
  }
  SECTION("a negative or NaN max allows no delay") {
    auto s = exponential(5, 3, -1, jitter::full);
    backoff_policy pol{5, 60, {{error_class::retryable, s}}};
    CHECK(pol.delay_s(3, error_class::retryable, 0, rng) == 0);
    s.max_s = std::nan("");
    backoff_policy pol2{5, 60, {{error_class::retryable, s}}};
    CHECK(pol2.delay_s(3, error_class::retryable, 0, rng) == 0);
  }
  SECTION("an infinite max with huge counts still gives a finite delay") {
    auto s =
      exponential(5, 3, std::numeric_limits<double>::infinity(), jitter::equal);
    backoff_policy pol{5, 60, {{error_class::retryable, s}}};
    auto d = pol.delay_s(INT_MAX, error_class::retryable, 0, rng);
    CHECK(std::isfinite(d));
    CHECK(d > 0);
  }
}

TEST_CASE("full jitter draws from [0, d] and spreads over it") {
  backoff_policy pol{
    5, 60, {{error_class::retryable, exponential(10, 2, 1000, jitter::full)}}};
  backoff_rng rng{42};
  double lo = 1e9;
  double hi = -1;
  for (int i = 0; i < 2000; ++i) {
    auto d = pol.delay_s(2, error_class::retryable, 0, rng); // d = 40
    REQUIRE(d >= 0);
    REQUIRE(d <= 40);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  CHECK(lo < 4);
  CHECK(hi > 36);
}

TEST_CASE("equal jitter draws from [d/2, d]") {
  backoff_policy pol{
    5, 60, {{error_class::retryable, exponential(10, 2, 1000, jitter::equal)}}};
  backoff_rng rng{43};
  double lo = 1e9;
  double hi = -1;
  for (int i = 0; i < 2000; ++i) {
    auto d = pol.delay_s(2, error_class::retryable, 0, rng); // d = 40
    REQUIRE(d >= 20);
    REQUIRE(d <= 40);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  CHECK(lo < 22);
  CHECK(hi > 38);
}

TEST_CASE("decorrelated jitter draws from [initial, min(max, 3 x previous)]") {
  backoff_policy pol{
    5,
    60,
    {{error_class::retryable, exponential(2, 2, 100, jitter::decorrelated)}}};
  backoff_rng rng{44};
  SECTION("the first delay is the initial one") {
    CHECK(pol.delay_s(0, error_class::retryable, 0, rng) == 2);
  }
  SECTION("later delays stay between initial and 3 x previous") {
    double lo = 1e9;
    double hi = -1;
    for (int i = 0; i < 2000; ++i) {
      auto d = pol.delay_s(5, error_class::retryable, 10, rng);
      REQUIRE(d >= 2);
      REQUIRE(d <= 30);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    CHECK(lo < 4);
    CHECK(hi > 28);
  }
  SECTION("the cap applies to 3 x previous") {
    for (int i = 0; i < 500; ++i) {
      auto d = pol.delay_s(5, error_class::retryable, 90, rng);
      REQUIRE(d >= 2);
      REQUIRE(d <= 100);
    }
  }
  SECTION("a chain of delays fed back stays within bounds") {
    double prev = 0;
    for (int i = 0; i < 500; ++i) {
      prev = pol.delay_s(i, error_class::retryable, prev, rng);
      REQUIRE(prev >= 2);
      REQUIRE(prev <= 100);
    }
  }
}

TEST_CASE("additive and proportional jitter stay within their bounds and "
          "the cap") {
  struct row {
    jitter j;
    double step;
    double lo;
    double hi;
  };
  // exponential(initial 4, x2, max 30): steps 4, 8, 16, 30 (capped).
  auto rows = std::vector<row>{
    {jitter::additive, 4, 4, 8},
    {jitter::additive, 16, 16, 20},
    {jitter::additive, 30, 30, 30},
    {jitter::proportional, 4, 3.2, 4.8},
    {jitter::proportional, 16, 12.8, 19.2},
    {jitter::proportional, 30, 24, 30},
  };
  auto spec = exponential(4, 2, 30, jitter::none);
  for (auto& r : rows) {
    INFO(to_string(r.j) << " step " << r.step);
    spec.jit = r.j;
    auto retry = r.step == 4 ? 0 : r.step == 16 ? 2 : 5;
    backoff_rng rng{7};
    double lo = 1e9;
    double hi = 0;
    for (int i = 0; i < 2000; ++i) {
      auto d = compute_delay(spec, retry, 0, rng);
      CHECK(d.source == delay_source::jitter);
      lo = std::min(lo, d.delay_s);
      hi = std::max(hi, d.delay_s);
    }
    CHECK(lo >= r.lo);
    CHECK(hi <= r.hi);
    // The draws cover the range (not one fixed value), unless capped.
    if (r.lo < r.hi)
      CHECK(hi - lo > (r.hi - r.lo) * 0.8);
  }
}

TEST_CASE("jitter is deterministic for a seed and varies between seeds") {
  for (auto j : {jitter::full, jitter::equal, jitter::decorrelated,
                 jitter::additive, jitter::proportional}) {
    backoff_policy pol{
      5, 60, {{error_class::retryable, exponential(1, 3, 500, j)}}};
    auto draw = [&](std::uint64_t seed) {
      backoff_rng rng{seed};
      std::vector<double> out;
      double prev = 0;
      for (int i = 0; i < 20; ++i)
        out.push_back(prev = pol.delay_s(i, error_class::retryable, prev, rng));
      return out;
    };
    CHECK(draw(123) == draw(123));
    CHECK(draw(123) != draw(124));
  }
}

TEST_CASE("a retry-after hint replaces the delay but is capped by max") {
  backoff_policy pol;
  backoff_rng rng{1};
  CHECK(pol.delay_s(0, error_class::rate_limit, 0, rng, 30.0) == 30);
  CHECK(pol.delay_s(2, error_class::rate_limit, 0, rng, 0.0) == 0);
  CHECK(pol.delay_s(0, error_class::rate_limit, 0, rng, 1000.0) == 300);
  CHECK(pol.delay_s(0, error_class::retryable, 0, rng, 1000.0) == 45);
  CHECK(pol.delay_s(0, error_class::rate_limit, 0, rng,
                    std::numeric_limits<double>::infinity()) == 300);
  SECTION("negative and NaN hints are ignored") {
    CHECK(pol.delay_s(1, error_class::rate_limit, 0, rng, -5.0) == 120);
    CHECK(pol.delay_s(1, error_class::rate_limit, 0, rng, std::nan("")) == 120);
  }
  SECTION("a hint is not jittered") {
    backoff_policy jittered{
      5,
      60,
      {{error_class::rate_limit, exponential(60, 2, 300, jitter::full)}}};
    for (int i = 0; i < 50; ++i)
      CHECK(jittered.delay_s(0, error_class::rate_limit, 0, rng, 20.0) == 20);
  }
}

TEST_CASE("jitter names round-trip") {
  for (auto j : {jitter::none, jitter::full, jitter::equal,
                 jitter::decorrelated, jitter::additive, jitter::proportional})
    CHECK(parse_jitter(to_string(j)) == j);
  CHECK(to_string(jitter::decorrelated) == "decorrelated");
  CHECK_FALSE(parse_jitter("Full"));
  CHECK_FALSE(parse_jitter(""));
}

#include "tasksup/supervisor/supervisor_config.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <vector>

using namespace tasksup;

TEST_CASE("restart types round-trip through their names") {
  CHECK(to_string(restart_type::transient) == "transient");
  CHECK(to_string(restart_type::permanent) == "permanent");
  CHECK(to_string(restart_type::temporary) == "temporary");
  for (auto x : {restart_type::transient, restart_type::permanent,
                 restart_type::temporary})
    CHECK(parse_restart_type(to_string(x)) == x);
  CHECK_FALSE(parse_restart_type("Permanent"));
  CHECK_FALSE(parse_restart_type(""));
  CHECK_FALSE(parse_restart_type("transient "));
}

TEST_CASE("supervisor config defaults match the spec") {
  supervisor_config cfg;
  CHECK(cfg.max_retries_per_agent == 3);
  CHECK(cfg.enable_fallback);
  CHECK(cfg.max_total_attempts == 30);
  CHECK(cfg.max_crash_restarts == 1);
  CHECK(cfg.restart == restart_type::transient);
  CHECK(cfg.intensity.max_restarts == 10);
  CHECK(cfg.intensity.period_s == 3600);
  REQUIRE(cfg.actions.size() == all_error_classes.size());
  CHECK(cfg.actions.at(error_class::fatal) == action::fail);
  CHECK(cfg.actions.at(error_class::agent_failure) == action::fallback);
  CHECK(cfg.actions.at(error_class::rate_limit) == action::retry);
  backoff_rng rng{1};
  auto pol = cfg.make_backoff();
  CHECK(pol.delay_s(0, error_class::retryable, 0, rng) == 5);
  CHECK(pol.delay_s(0, error_class::rate_limit, 0, rng) == 60);
}

TEST_CASE("same_settings compares every setting exactly") {
  supervisor_config a;
  supervisor_config b;
  CHECK(same_settings(a, b));
  CHECK(settings_hash(a) == settings_hash(b));
  // Each change below alone makes the settings differ.
  std::vector<void (*)(supervisor_config&)> changes{
    [](supervisor_config& c) { c.max_retries_per_agent = 4; },
    [](supervisor_config& c) { c.enable_fallback = false; },
    [](supervisor_config& c) { c.backoff_base_seconds = 6; },
    [](supervisor_config& c) { c.rate_limit_backoff_base = 61; },
    [](supervisor_config& c) { c.max_total_attempts = 31; },
    [](supervisor_config& c) { c.max_crash_restarts = 2; },
    [](supervisor_config& c) { c.actions[error_class::fatal] = action::retry; },
    [](supervisor_config& c) { c.restart = restart_type::permanent; },
    [](supervisor_config& c) { c.intensity.max_restarts = 11; },
    [](supervisor_config& c) { c.intensity.period_s = 60; },
    [](supervisor_config& c) { c.intensity.reset_after_s = 1; },
    [](supervisor_config& c) {
      c.backoff[error_class::retryable] = standard_backoff(1);
    },
    [](supervisor_config& c) { c.deadline_s = 3600; },
    [](supervisor_config& c) { c.stop_grace_s = 1; },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    CAPTURE(i);
    supervisor_config changed;
    changes[i](changed);
    CHECK_FALSE(same_settings(a, changed));
    CHECK_FALSE(same_settings(changed, a));
    CHECK(same_settings(changed, changed));
  }
}

TEST_CASE("same_settings looks into the per-class backoff overrides") {
  supervisor_config a;
  a.backoff[error_class::retryable] = standard_backoff(2);
  auto b = a;
  CHECK(same_settings(a, b));
  CHECK(settings_hash(a) == settings_hash(b));
  SECTION("another table entry") {
    b.backoff[error_class::retryable].table_s.back() = 19;
  }
  SECTION("another cap") {
    b.backoff[error_class::retryable].max_s = 1;
  }
  SECTION("another jitter") {
    b.backoff[error_class::retryable].jit = jitter::full;
  }
  SECTION("another class") {
    b.backoff.clear();
    b.backoff[error_class::rate_limit] = standard_backoff(2);
  }
  CHECK_FALSE(same_settings(a, b));
}

TEST_CASE("same_settings compares doubles bit for bit") {
  // 0 and -0 compare equal as numbers but can print differently (a
  // `delay_s` of -0 in an event), so settings holding them are not shared.
  supervisor_config zero;
  zero.backoff_base_seconds = 0.0;
  supervisor_config negative_zero;
  negative_zero.backoff_base_seconds = -0.0;
  CHECK_FALSE(same_settings(zero, negative_zero));
  // A NaN is the same setting as itself.
  supervisor_config nan;
  nan.deadline_s = std::numeric_limits<double>::quiet_NaN();
  auto nan2 = nan;
  CHECK(same_settings(nan, nan2));
  CHECK(settings_hash(nan) == settings_hash(nan2));
  // Set and unset differ even from a value of 0.
  supervisor_config unset;
  supervisor_config set_zero;
  set_zero.deadline_s = 0.0;
  CHECK_FALSE(same_settings(unset, set_zero));
}

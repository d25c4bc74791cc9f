#include "supervisor/supervisor_config.hpp"

#include <catch2/catch.hpp>

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

#include "tasksup/supervisor/error_class.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace tasksup;

TEST_CASE("every error class round-trips through its config name",
          "[error_class]") {
  std::set<std::string> names;
  for (auto cls : all_error_classes) {
    auto name = to_string(cls);
    CHECK_FALSE(name.empty());
    names.emplace(name);
    auto parsed = parse_error_class(name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == cls);
  }
  CHECK(names.size() == all_error_classes.size());
}

TEST_CASE("error class names are the documented snake_case names",
          "[error_class]") {
  CHECK(to_string(error_class::container_crash) == "container_crash");
  CHECK(to_string(error_class::rate_limit) == "rate_limit");
  CHECK(to_string(error_class::fatal) == "fatal");
  CHECK(to_string(error_class::agent_failure) == "agent_failure");
  CHECK(to_string(error_class::retryable) == "retryable");
  CHECK(to_string(error_class::infrastructure) == "infrastructure");
}

TEST_CASE("unknown error class names are rejected", "[error_class]") {
  CHECK_FALSE(parse_error_class(""));
  CHECK_FALSE(parse_error_class("Fatal"));
  CHECK_FALSE(parse_error_class("rate-limit"));
  CHECK_FALSE(parse_error_class("fatal "));
  CHECK_FALSE(parse_error_class("default"));
}

TEST_CASE("every action round-trips through its config name", "[error_class]") {
  for (auto x : {action::retry, action::fallback, action::fail}) {
    auto parsed = parse_action(to_string(x));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == x);
  }
  CHECK(to_string(action::retry) == "retry");
  CHECK(to_string(action::fallback) == "fallback");
  CHECK(to_string(action::fail) == "fail");
  CHECK_FALSE(parse_action(""));
  CHECK_FALSE(parse_action("Retry"));
  CHECK_FALSE(parse_action("restart"));
}

TEST_CASE("default actions follow the documented table", "[error_class]") {
  CHECK(default_action(error_class::container_crash) == action::retry);
  CHECK(default_action(error_class::rate_limit) == action::retry);
  CHECK(default_action(error_class::fatal) == action::fail);
  CHECK(default_action(error_class::agent_failure) == action::fallback);
  CHECK(default_action(error_class::retryable) == action::retry);
  CHECK(default_action(error_class::infrastructure) == action::retry);
}

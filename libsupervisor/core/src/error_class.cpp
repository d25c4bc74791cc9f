#include "tasksup/supervisor/error_class.hpp"

#include <cstddef>
#include <iterator>

namespace tasksup {

namespace {

// Kept in declaration order; a unit test checks every value round-trips.
constexpr std::string_view class_names[] = {
  "container_crash",  "rate_limit",      "fatal",       "agent_failure",
  "retryable",        "infrastructure",  "gate_failed", "timeout",
  "preflight_failed", "quota_exhausted", "needs_input", "not_now",
  "invalid_output",
};

constexpr std::string_view action_names[] = {"retry", "fallback", "fail"};

} // namespace

std::string_view to_string(error_class x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(class_names) ? class_names[i]
                                    : std::string_view{"unknown"};
}

std::optional<error_class> parse_error_class(std::string_view str) noexcept {
  for (auto cls : all_error_classes)
    if (to_string(cls) == str)
      return cls;
  return std::nullopt;
}

std::string_view to_string(action x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(action_names) ? action_names[i]
                                     : std::string_view{"unknown"};
}

std::optional<action> parse_action(std::string_view str) noexcept {
  for (auto x : {action::retry, action::fallback, action::fail})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

action default_action(error_class x) noexcept {
  switch (x) {
    case error_class::fatal:
      return action::fail;
    case error_class::agent_failure:
    case error_class::quota_exhausted:
    case error_class::needs_input:
      return action::fallback;
    default:
      return action::retry;
  }
}

} // namespace tasksup

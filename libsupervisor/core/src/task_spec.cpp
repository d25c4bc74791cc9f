#include "tasksup/supervisor/task_spec.hpp"

#include <cstddef>
#include <iterator>

namespace tasksup {

namespace {

// Kept in declaration order.
constexpr std::string_view delivery_names[] = {"branch", "apply", "patch"};

} // namespace

std::string_view to_string(delivery_mode x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(delivery_names) ? delivery_names[i]
                                       : std::string_view{"unknown"};
}

std::optional<delivery_mode>
parse_delivery_mode(std::string_view str) noexcept {
  for (auto x :
       {delivery_mode::branch, delivery_mode::apply, delivery_mode::patch})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

supervisor_config effective_settings(const task_spec& task) {
  auto out = task.settings;
  apply_overrides(out, task.supervisor);
  return out;
}

} // namespace tasksup

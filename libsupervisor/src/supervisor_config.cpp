#include "supervisor/supervisor_config.hpp"

#include <cstddef>

namespace tasksup {

namespace {

// Kept in declaration order; a unit test checks every value round-trips.
constexpr std::string_view restart_type_names[] = {"transient", "permanent",
                                                   "temporary"};

} // namespace

std::string_view to_string(restart_type x) noexcept {
  return restart_type_names[static_cast<std::size_t>(x)];
}

std::optional<restart_type> parse_restart_type(std::string_view str) noexcept {
  for (auto x : {restart_type::transient, restart_type::permanent,
                 restart_type::temporary})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

} // namespace tasksup

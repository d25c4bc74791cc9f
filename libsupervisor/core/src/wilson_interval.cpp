#include "tasksup/supervisor/wilson_interval.hpp"

#include <algorithm>
#include <cmath>

namespace tasksup {

double wilson_lower_bound(int successes, int trials, double z) noexcept {
  if (trials <= 0)
    return 0;
  auto n = static_cast<double>(trials);
  auto p = static_cast<double>(successes) / n;
  auto z2n = z * z / n;
  auto centre = p + z2n / 2;
  auto margin = z * std::sqrt(p * (1 - p) / n + z2n / (4.0 * n));
  return std::max(0.0, (centre - margin) / (1 + z2n));
}

} // namespace tasksup

#pragma once

// The Wilson score interval of a success rate (Wilson 1927): unlike the
// plain rate, its bounds account for how many trials the rate comes from,
// so ranking agents by the lower bound puts 9 successes of 10 above 1 of 1.

namespace tasksup {

/// The normal quantile of a two-sided 95 % interval.
inline constexpr double wilson_z_95 = 1.96;

/// The lower bound of the Wilson score interval of `successes` out of
/// `trials` at the normal quantile `z`, in [0, 1]; 0 when there are no
/// trials.
double wilson_lower_bound(int successes, int trials,
                          double z = wilson_z_95) noexcept;

} // namespace tasksup

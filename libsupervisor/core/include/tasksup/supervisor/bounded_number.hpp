#pragma once

// Numbers that arrive from outside (an agent's output, a task file, a remote
// message, the journal, an HTTP request) are bounded where they enter, and
// so is every sum of them: a double is finite and clamped into its range,
// an integer sum saturates instead of overflowing. Nothing downstream then
// meets an infinity, a NaN or a wrapped counter, and nothing that serializes
// a number has to handle one (CAF 0.17's binary serializer does not end on
// an infinite double).

#include <cmath>
#include <cstdint>
#include <limits>

namespace tasksup {

/// The largest cost in US dollars an attempt or a task records: far above
/// any real bill, far below where a sum of a few of them stops being finite.
inline constexpr double max_cost_usd = 1e9;

/// `a + b`, or the int64 bound on the side it would have overflowed to.
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    return b > 0 ? std::numeric_limits<std::int64_t>::max()
                 : std::numeric_limits<std::int64_t>::min();
  return out;
}

/// `x` clamped into [lo, hi]; NaN becomes `lo`, the infinities the bound on
/// their side, and -0 at a bound of 0 is 0.
inline double clamp_number(double x, double lo, double hi) noexcept {
  if (std::isnan(x) || x <= lo)
    return lo;
  if (x > hi)
    return hi;
  return x;
}

/// A cost as recorded: clamped into [0, max_cost_usd].
inline double bounded_cost(double usd) noexcept {
  return clamp_number(usd, 0.0, max_cost_usd);
}

/// The sum of two recorded costs, clamped like one.
inline double add_cost(double a, double b) noexcept {
  return bounded_cost(bounded_cost(a) + bounded_cost(b));
}

} // namespace tasksup

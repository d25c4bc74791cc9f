#include "tasksup/supervisor/backoff.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view jitter_names[] = {
  "none", "full", "equal", "decorrelated", "additive", "proportional"};

/// A finite, non-negative cap; a NaN or negative `max_s` allows no delay.
double sanitize_cap(double max_s) {
  if (std::isnan(max_s) || max_s < 0)
    return 0;
  return std::min(max_s, std::numeric_limits<double>::max());
}

/// Clamps `x` into [0, cap], treating NaN as 0.
double clamp_delay(double x, double cap) {
  if (std::isnan(x) || x < 0)
    return 0;
  return std::min(x, cap);
}

/// Uniform in [lo, hi] from 53 random bits. Written out rather than using
/// std::uniform_real_distribution so that a seed gives the same delays with
/// every standard library.
double uniform(backoff_rng& rng, double lo, double hi) {
  if (!(hi > lo))
    return lo;
  auto unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return std::min(hi, lo + (hi - lo) * unit);
}

/// The delay before jitter: a table entry or initial x multiplier^n.
double base_delay(const backoff_spec& spec, int retry_count) {
  if (spec.kind == backoff_spec::kind_t::table) {
    if (spec.table_s.empty())
      return 0;
    auto last = spec.table_s.size() - 1;
    auto idx = std::min(static_cast<std::size_t>(retry_count), last);
    return spec.table_s[idx];
  }
  // Exponential. std::pow saturates to infinity instead of overflowing, and
  // the caller caps the result, so any retry count is safe.
  if (std::isnan(spec.initial_s) || spec.initial_s <= 0)
    return 0;
  if (std::isnan(spec.multiplier) || spec.multiplier < 0)
    return spec.initial_s;
  return spec.initial_s * std::pow(spec.multiplier, retry_count);
}

/// The lower bound of decorrelated jitter: the first delay of the schedule.
double first_delay(const backoff_spec& spec) {
  if (spec.kind == backoff_spec::kind_t::table)
    return spec.table_s.empty() ? 0.0 : spec.table_s.front();
  return spec.initial_s;
}

backoff_spec table_spec(double base_s, std::vector<double> factors) {
  backoff_spec out;
  out.kind = backoff_spec::kind_t::table;
  for (auto f : factors)
    out.table_s.push_back(base_s * f);
  out.initial_s = base_s;
  out.max_s = base_s * factors.back();
  out.jit = jitter::none;
  return out;
}

} // namespace

std::string_view to_string(jitter x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(jitter_names) ? jitter_names[i]
                                     : std::string_view{"unknown"};
}

std::optional<jitter> parse_jitter(std::string_view str) noexcept {
  for (auto x : {jitter::none, jitter::full, jitter::equal,
                 jitter::decorrelated, jitter::additive, jitter::proportional})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

double scheduled_delay_s(const backoff_spec& spec, int step) {
  return clamp_delay(base_delay(spec, std::max(step, 0)),
                     sanitize_cap(spec.max_s));
}

backoff_spec not_now_backoff() {
  backoff_spec x;
  x.kind = backoff_spec::kind_t::exponential;
  x.initial_s = 30.0;
  x.multiplier = 2.0;
  x.max_s = 600.0;
  return x;
}

backoff_spec standard_backoff(double base_s) {
  return table_spec(base_s, {1, 3, 9});
}

backoff_spec rate_limit_backoff(double base_s) {
  return table_spec(base_s, {1, 2, 5});
}

backoff_policy::backoff_policy(double backoff_base_s, double rate_limit_base_s,
                               std::map<error_class, backoff_spec> overrides)
  : standard_(standard_backoff(backoff_base_s)),
    rate_limit_(rate_limit_backoff(rate_limit_base_s)),
    not_now_(not_now_backoff()), overrides_(std::move(overrides)) {}

const backoff_spec& backoff_policy::spec(error_class cls) const {
  if (auto i = overrides_.find(cls); i != overrides_.end())
    return i->second;
  if (cls == error_class::rate_limit)
    return rate_limit_;
  return cls == error_class::not_now ? not_now_ : standard_;
}

double backoff_policy::delay_s(int retry_count, error_class cls,
                               double previous_s, backoff_rng& rng,
                               std::optional<double> hint_s) const {
  return compute_delay(spec(cls), retry_count, previous_s, rng, hint_s).delay_s;
}

std::string_view to_string(delay_source x) noexcept {
  switch (x) {
    case delay_source::schedule:
      return "schedule";
    case delay_source::jitter:
      return "jitter";
    case delay_source::retry_after_hint:
      return "retry_after_hint";
  }
  return "unknown";
}

delay_decision compute_delay(const backoff_spec& spec, int retry_index,
                             double previous_s, backoff_rng& rng,
                             std::optional<double> hint_s) {
  delay_decision out;
  auto cap = sanitize_cap(spec.max_s);
  auto step = std::max(retry_index, 0);
  if (spec.kind == backoff_spec::kind_t::table && !spec.table_s.empty())
    step = static_cast<int>(
      std::min(static_cast<std::size_t>(step), spec.table_s.size() - 1));
  out.step = step;
  out.scheduled_s = base_delay(spec, std::max(retry_index, 0));
  auto capped = [&](double x) {
    auto d = clamp_delay(x, cap);
    out.capped = out.capped || (!std::isnan(x) && x > cap);
    return d;
  };
  // The server said when to come back: that is the delay, without jitter,
  // but never beyond the policy's maximum. Nonsense hints are ignored.
  if (hint_s && !std::isnan(*hint_s) && *hint_s >= 0) {
    out.source = delay_source::retry_after_hint;
    out.delay_s = capped(*hint_s);
    return out;
  }
  auto d = capped(out.scheduled_s);
  out.source =
    spec.jit == jitter::none ? delay_source::schedule : delay_source::jitter;
  switch (spec.jit) {
    case jitter::none:
      out.delay_s = d;
      break;
    case jitter::full:
      out.delay_s = clamp_delay(uniform(rng, 0, d), cap);
      break;
    case jitter::equal:
      out.delay_s = clamp_delay(d / 2 + uniform(rng, 0, d / 2), cap);
      break;
    case jitter::decorrelated: {
      auto lo = clamp_delay(first_delay(spec), cap);
      auto prev = clamp_delay(previous_s, cap);
      auto hi = std::min(std::max(lo, prev * 3), cap);
      out.delay_s = clamp_delay(uniform(rng, lo, hi), cap);
      break;
    }
    case jitter::additive: {
      // The amount added is the schedule's own scale: its first step.
      auto extra = clamp_delay(first_delay(spec), cap);
      out.delay_s = clamp_delay(d + uniform(rng, 0, extra), cap);
      break;
    }
    case jitter::proportional:
      out.delay_s = clamp_delay(
        d * uniform(rng, 1 - proportional_jitter, 1 + proportional_jitter),
        cap);
      break;
  }
  return out;
}

} // namespace tasksup

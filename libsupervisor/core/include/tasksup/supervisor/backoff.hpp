#pragma once

#include "tasksup/supervisor/error_class.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

namespace tasksup {

/// Randomness for jitter comes from the caller, seeded, so tests are
/// deterministic (as in gRPC's backoff).
using backoff_rng = std::mt19937_64;

/// How a computed delay is randomised (AWS architecture blog's terms, plus
/// two that never shorten a step much): `additive` adds up to the
/// schedule's first step, `proportional` spreads the step by
/// +-`proportional_jitter` (gRPC's backoff spreads by 20% too).
enum class jitter { none, full, equal, decorrelated, additive, proportional };

/// The spread of `proportional` jitter: the step times [0.8, 1.2].
inline constexpr double proportional_jitter = 0.2;

/// "none", "full", "equal", "decorrelated", "additive" or "proportional".
std::string_view to_string(jitter x) noexcept;

/// Parses the names above; nullopt for anything else.
std::optional<jitter> parse_jitter(std::string_view str) noexcept;

/// The delay schedule for one error class.
struct backoff_spec {
  /// A fixed table of delays, or an exponential curve.
  enum class kind_t { table, exponential };
  /// Which of the two this spec is.
  kind_t kind = kind_t::table;
  /// For `table`: the delay of retry 0, 1, 2, ...; the last entry repeats.
  /// An empty table means no delay (config validation rejects it).
  std::vector<double> table_s;
  /// For `exponential`: initial_s * multiplier^retry_count.
  double initial_s = 5.0;
  /// Growth factor per retry of the exponential curve.
  double multiplier = 3.0;
  /// Cap for every delay of this class, hint included. Never exceeded.
  double max_s = 45.0;
  /// How the delay is randomised. Decorrelated jitter draws from
  /// [first delay, max(first delay, 3 x previous)]; additive from
  /// [step, step + first delay]; proportional from [0.8, 1.2] x step; all
  /// capped at max_s.
  jitter jit = jitter::none;
};

/// Where a delay came from, so "why this delay?" is answered by data.
enum class delay_source : std::uint8_t {
  /// The schedule's step for this retry, as configured.
  schedule,
  /// The schedule's step, randomised by the spec's jitter.
  jitter,
  /// A retry-after hint from the agent's output (rate limits only).
  retry_after_hint,
};

/// "schedule", "jitter" or "retry_after_hint".
std::string_view to_string(delay_source x) noexcept;

/// One computed delay and how it came about.
struct delay_decision {
  /// The delay in seconds, within [0, max_s].
  double delay_s = 0;
  /// What set it.
  delay_source source = delay_source::schedule;
  /// The schedule's step before jitter, hint or cap.
  double scheduled_s = 0;
  /// The step of the schedule used (0 for the first retry; a table's last
  /// step repeats).
  int step = 0;
  /// True when the spec's `max_s` cut the delay.
  bool capped = false;
};

/// The delay before retry `retry_index` (0 for the first) under `spec`, in
/// seconds, within [0, spec.max_s]. `previous_s` is the task's previous
/// delay (decorrelated jitter; 0 for none). A `hint_s` replaces the schedule,
/// without jitter, still capped; a negative or NaN hint is ignored. The
/// randomness comes from `rng`, so a seed reproduces the delays.
delay_decision compute_delay(const backoff_spec& spec, int retry_index,
                             double previous_s, backoff_rng& rng,
                             std::optional<double> hint_s = std::nullopt);

/// The schedule's delay for step `step` (0 for the first), capped at
/// `max_s`, without jitter: the task machine's own waits, which draw no
/// random numbers.
double scheduled_delay_s(const backoff_spec& spec, int step);

/// The `not_now` schedule: 30 s doubling each time, at most 600 s.
backoff_spec not_now_backoff();

/// The seed's standard schedule: base x {1, 3, 9}, capped at base x 9
/// (5, 15, 45 for base 5).
backoff_spec standard_backoff(double base_s);

/// The seed's rate-limit schedule: base x {1, 2, 5}, capped at base x 5
/// (60, 120, 300 for base 60).
backoff_spec rate_limit_backoff(double base_s);

/// Per-class backoff: `rate_limit` uses the rate-limit schedule, every other
/// class the standard one, unless overridden per class.
class backoff_policy {
public:
  /// The standard and rate-limit schedules scaled by their bases, with
  /// per-class `overrides` taking precedence.
  backoff_policy(double backoff_base_s = 5.0, double rate_limit_base_s = 60.0,
                 std::map<error_class, backoff_spec> overrides = {});

  /// The spec in force for `cls`.
  const backoff_spec& spec(error_class cls) const;

  /// The delay before retry `retry_count` (0 for the first retry) of a failure
  /// of class `cls`, in seconds, within [0, spec(cls).max_s].
  /// `previous_s` is the previous delay of this task (for decorrelated jitter;
  /// 0 for the first). A `hint_s` (retry-after) replaces the computed delay,
  /// without jitter, still capped by max_s; a negative or NaN hint is
  /// ignored. Safe for any retry count (the curve saturates at max_s).
  double delay_s(int retry_count, error_class cls, double previous_s,
                 backoff_rng& rng,
                 std::optional<double> hint_s = std::nullopt) const;

private:
  backoff_spec standard_;
  backoff_spec rate_limit_;
  backoff_spec not_now_;
  std::map<error_class, backoff_spec> overrides_;
};

} // namespace tasksup

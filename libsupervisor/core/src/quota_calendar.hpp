#pragma once

// The calendar, the time zones and the scanning helpers the quota-reset
// parser (quota_reset.cpp) and the schedules (schedule.cpp) read times
// with; the zones are in quota_zones.cpp. Private to the core.

#include "text_scan.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tasksup::detail {

/// Unix time in seconds; days are Unix days (0 = 1970-01-01).
using sys_seconds = int64_t;

constexpr int64_t day_s = 86400;

inline int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// days_from_civil).
inline int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  auto era = floor_div(y, 400);
  auto yoe = y - era * 400;
  auto mp = (m + 9) % 12;
  auto doy = (153 * mp + 2) / 5 + d - 1;
  auto doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

struct ymd {
  int64_t year;
  unsigned month;
  unsigned day;
};

/// The date of a day since 1970-01-01 (civil_from_days).
inline ymd civil_from_days(int64_t z) {
  z += 719468;
  auto era = floor_div(z, 146097);
  auto doe = z - era * 146097;
  auto yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  auto doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  auto mp = (5 * doy + 2) / 153;
  auto d = static_cast<unsigned>(doy - (153 * mp + 2) / 5 + 1);
  auto m = static_cast<unsigned>(mp < 10 ? mp + 3 : mp - 9);
  return ymd{yoe + era * 400 + (m <= 2 ? 1 : 0), m, d};
}

inline bool is_leap(int64_t y) {
  return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

inline unsigned last_day_of(int64_t y, unsigned m) {
  constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/// 0 = Sunday.
inline unsigned weekday_of(int64_t days) {
  return static_cast<unsigned>(((days + 4) % 7 + 7) % 7);
}

/// `word` at `pos` and not followed by a letter.
std::size_t match_token(std::string_view s, std::size_t pos,
                        std::string_view word);

/// Advances `pos` past any of the characters in `set`.
std::size_t skip(std::string_view s, std::size_t pos, std::string_view set);

/// An unsigned integer of 1..`max_digits` digits at `pos`; advances `pos`.
/// Fails on more digits, so no value overflows.
std::optional<int64_t> integer(std::string_view s, std::size_t& pos,
                               std::size_t max_digits);

/// A zone as written after a time: "UTC", "GMT", "Z", "+02:00", "UTC+2",
/// or an IANA name. `fixed_s` is set for fixed offsets, `name` otherwise.
struct zone {
  std::optional<int64_t> fixed_s;
  std::string_view name;
};

/// The UTC instant of local wall time `local` in `z`; nullopt for an
/// unknown zone name.
std::optional<sys_seconds> to_utc(const zone& z, sys_seconds local);

/// The offset east of UTC, in seconds, of `z` at `now`.
std::optional<int64_t> offset_now(const zone& z, sys_seconds now);

/// Where a local wall time falls on the UTC time line, clock changes
/// included (`to_utc` gives one instant and is not exact in them).
struct local_instants {
  /// The first instant the clocks of the zone show the wall time; for a
  /// wall time a clock change skips (spring forward), the instant of that
  /// change: the first instant after the gap.
  sys_seconds first = 0;
  /// The last instant showing it: later than `first` in an hour a clock
  /// change repeats (fall back), else `first`.
  sys_seconds last = 0;
  /// Whether a clock change skips the wall time.
  bool skipped = false;
};

/// Where wall time `local` of `z` falls; nullopt for an unknown zone name.
/// Reads the offsets a day before and a day after `local`: exact when the
/// zone changes its clocks at most once within a day of it, as today's
/// rules of every zone do.
std::optional<local_instants> local_to_utc(const zone& z, sys_seconds local);

/// A zone after a time, optionally in parentheses; UTC when none is
/// written (the agent's own zone is unknown; containers run in UTC).
zone parse_zone(std::string_view s, std::size_t& pos);

} // namespace tasksup::detail

// When a usage or plan limit resets (quota_exhausted; docs/BEHAVIOUR.md,
// Failure classes): parses the reset the agent CLIs print ("resets 3:10am
// (Europe/Berlin)", "try again at Nov 28th, 2026 2:10 AM", "resets_in_seconds":
// 7980) into seconds from an explicit `now`. Zone names are read from the
// system tz database
// (/usr/share/zoneinfo, TZif files) per call: no global state, no TZ
// variable, so it is safe from any thread.
#include "tasksup/supervisor/classifier.hpp"

#include "quota_calendar.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::lower;
using detail::match_word;

using detail::civil_from_days;
using detail::day_s;
using detail::days_from_civil;
using detail::floor_div;
using detail::integer;
using detail::last_day_of;
using detail::match_token;
using detail::offset_now;
using detail::parse_zone;
using detail::skip;
using detail::sys_seconds;
using detail::to_utc;
using detail::weekday_of;
using detail::ymd;
using detail::zone;

/// How far after a trigger word a reset may be written ("resets at Nov
/// 28th, 2026 2:10 AM (America/Los_Angeles)"): bounds the work per trigger.
constexpr std::size_t max_reset_text = 96;

/// Most triggers ("resets", "try again", ...) read in one line: each may
/// look up a zone file, so a line made of triggers costs a bounded amount.
constexpr int max_triggers_per_line = 16;

// --- dates and times ------------------------------------------------------

/// Hours, minutes, seconds of a clock time.
struct clock_time {
  int64_t seconds_of_day = 0;
};

/// "3pm", "3:10am", "2:10 AM", "15:00", "15:00:30": a clock time. A bare
/// number is not one ("resets 3 times").
std::optional<clock_time> parse_clock(std::string_view s, std::size_t& pos) {
  auto p = pos;
  auto h = integer(s, p, 2);
  if (!h)
    return std::nullopt;
  int64_t minute = 0;
  int64_t second = 0;
  bool colon = false;
  if (p + 1 < s.size() && s[p] == ':' && is_digit(s[p + 1])) {
    colon = true;
    ++p;
    auto begin = p;
    auto m = integer(s, p, 2);
    if (!m || p - begin != 2 || *m > 59)
      return std::nullopt;
    minute = *m;
    if (p + 1 < s.size() && s[p] == ':' && is_digit(s[p + 1])) {
      ++p;
      begin = p;
      auto sec = integer(s, p, 2);
      if (!sec || p - begin != 2 || *sec > 60)
        return std::nullopt;
      second = std::min<int64_t>(*sec, 59);
      // A fraction of a second ("02:10:00.123") is dropped.
      if (p + 1 < s.size() && s[p] == '.' && is_digit(s[p + 1])) {
        ++p;
        while (p < s.size() && is_digit(s[p]))
          ++p;
      }
    }
  }
  auto q = skip(s, p, " ");
  int64_t hour = *h;
  auto am = match_token(s, q, "am");
  auto pm = match_token(s, q, "pm");
  if (am == std::string_view::npos)
    am = match_token(s, q, "a.m.");
  if (pm == std::string_view::npos)
    pm = match_token(s, q, "p.m.");
  if (am != std::string_view::npos || pm != std::string_view::npos) {
    if (hour < 1 || hour > 12)
      return std::nullopt;
    hour = hour % 12 + (pm != std::string_view::npos ? 12 : 0);
    p = am != std::string_view::npos ? am : pm;
  } else if (!colon || hour > 23) {
    return std::nullopt;
  }
  pos = p;
  return clock_time{hour * 3600 + minute * 60 + second};
}

constexpr std::array<std::string_view, 12> month_names{
  "jan", "feb", "mar", "apr", "may", "jun",
  "jul", "aug", "sep", "oct", "nov", "dec"};

/// A calendar date: year 0 when it was not written.
struct civil_date {
  int year = 0;
  unsigned month = 0;
  unsigned day = 0;
};

/// "Nov 28th, 2026", "November 28", "28 Nov 2026", "2026-11-28" at `pos`.
std::optional<civil_date> parse_date(std::string_view s, std::size_t& pos) {
  auto p = pos;
  civil_date d;
  // ISO: YYYY-MM-DD
  if (p + 10 <= s.size() && is_digit(s[p]) && s[p + 4] == '-' &&
      s[p + 7] == '-') {
    auto q = p;
    auto y = integer(s, q, 4);
    if (y && q == p + 4) {
      ++q;
      auto m = integer(s, q, 2);
      if (m && q == p + 7) {
        ++q;
        auto dd = integer(s, q, 2);
        if (dd && q == p + 10 && *m >= 1 && *m <= 12 && *dd >= 1 && *dd <= 31) {
          pos = q;
          return civil_date{static_cast<int>(*y), static_cast<unsigned>(*m),
                            static_cast<unsigned>(*dd)};
        }
      }
    }
    return std::nullopt;
  }
  // An optional weekday ("Fri, ") first.
  for (std::string_view wd : {"mon", "tue", "wed", "thu", "fri", "sat", "sun"})
    if (auto e = match_word(s, p, wd); e != std::string_view::npos) {
      while (e < s.size() && is_alpha(s[e]))
        ++e;
      p = skip(s, e, " ,");
      break;
    }
  auto month_at = [&](std::size_t at, std::size_t& end) -> unsigned {
    for (std::size_t m = 0; m < month_names.size(); ++m)
      if (auto e = match_word(s, at, month_names[m]);
          e != std::string_view::npos) {
        while (e < s.size() && is_alpha(s[e]) && e - at < 10)
          ++e;
        if (e < s.size() && s[e] == '.')
          ++e;
        end = e;
        return static_cast<unsigned>(m + 1);
      }
    return 0;
  };
  auto day_at = [&](std::size_t& at) -> unsigned {
    auto v = integer(s, at, 2);
    if (!v || *v < 1 || *v > 31)
      return 0;
    for (std::string_view suffix : {"st", "nd", "rd", "th"})
      if (auto e = match_word(s, at, suffix); e != std::string_view::npos) {
        at = e;
        break;
      }
    return static_cast<unsigned>(*v);
  };
  std::size_t e = p;
  if (auto m = month_at(p, e)) { // Nov 28th
    d.month = m;
    auto q = skip(s, e, " ");
    d.day = day_at(q);
    if (d.day == 0)
      return std::nullopt;
    p = q;
  } else { // 28 Nov
    auto q = p;
    d.day = day_at(q);
    if (d.day == 0)
      return std::nullopt;
    q = skip(s, q, " ");
    d.month = month_at(q, e);
    if (d.month == 0)
      return std::nullopt;
    p = e;
  }
  // An optional year: ", 2026" (not a clock time "2:10").
  auto q = skip(s, p, " ,");
  auto yq = q;
  if (auto y = integer(s, yq, 4);
      y && yq - q == 4 && (yq >= s.size() || s[yq] != ':')) {
    d.year = static_cast<int>(*y);
    p = yq;
  }
  pos = p;
  return d;
}

/// An absolute reset at `pos`: an optional date, an optional "at", a clock
/// time, an optional zone. Seconds from `now`, which may be negative.
std::optional<int64_t> parse_absolute(std::string_view s, std::size_t pos,
                                      sys_seconds now) {
  auto p = pos;
  auto date = parse_date(s, p);
  if (date) {
    p = skip(s, p, " ,");
    if (auto e = match_token(s, p, "at"); e != std::string_view::npos)
      p = skip(s, e, " ");
    if (p < s.size() && (s[p] == 'T' || s[p] == 't'))
      ++p; // ISO's 'T'
  }
  auto clock = parse_clock(s, p);
  if (!clock) {
    if (!date)
      return std::nullopt;
    clock = clock_time{0}; // "resets on Nov 28": its midnight
  }
  auto z = parse_zone(s, p);
  // Days since 1970-01-01 of `now`'s date in the zone.
  auto local_today = [&]() -> std::optional<int64_t> {
    auto off = offset_now(z, now);
    if (!off)
      return std::nullopt;
    return floor_div(now + *off, day_s);
  };
  auto instant = [&](int64_t day) {
    return to_utc(z, day * day_s + clock->seconds_of_day);
  };
  std::optional<sys_seconds> at;
  if (date) {
    auto today = local_today();
    if (!today)
      return std::nullopt;
    int64_t year = date->year;
    if (year == 0)
      year = civil_from_days(*today).year;
    if (date->day > last_day_of(year, date->month))
      return std::nullopt;
    at = instant(days_from_civil(year, date->month, date->day));
    // A date without a year that has passed means next year's.
    if (at && date->year == 0 && *at + day_s < now) {
      if (date->day > last_day_of(year + 1, date->month))
        return std::nullopt;
      at = instant(days_from_civil(year + 1, date->month, date->day));
    }
  } else {
    // A time of day: its next occurrence after `now` in the zone.
    auto today = local_today();
    if (!today)
      return std::nullopt;
    at = instant(*today);
    if (at && *at <= now)
      at = instant(*today + 1);
  }
  if (!at)
    return std::nullopt;
  return *at - now;
}

/// "2 days 3 hours", "4h 12m", "2h13m", "90 minutes", "7980s" at `pos`:
/// seconds, or nullopt unless every number has a unit.
std::optional<int64_t> parse_span(std::string_view s, std::size_t pos) {
  struct unit {
    std::string_view name;
    int64_t seconds;
  };
  static constexpr unit units[] = {
    {"weeks", 604800}, {"week", 604800}, {"w", 604800},   {"days", 86400},
    {"day", 86400},    {"d", 86400},     {"hours", 3600}, {"hour", 3600},
    {"hrs", 3600},     {"hr", 3600},     {"h", 3600},     {"minutes", 60},
    {"minute", 60},    {"mins", 60},     {"min", 60},     {"m", 60},
    {"seconds", 1},    {"second", 1},    {"secs", 1},     {"sec", 1},
    {"s", 1},
  };
  int64_t total = 0;
  bool any = false;
  // At most a few components: "1 week 2 days 3 hours 4 minutes 5 seconds".
  for (int component = 0; component < 6 && pos < s.size(); ++component) {
    auto p = pos;
    auto value = integer(s, p, 7);
    if (!value)
      break;
    p = skip(s, p, " ");
    std::size_t end = std::string_view::npos;
    int64_t unit_s = 0;
    for (const auto& u : units)
      if (end = match_token(s, p, u.name); end != std::string_view::npos) {
        unit_s = u.seconds;
        break;
      }
    if (end == std::string_view::npos)
      break;
    total += *value * unit_s;
    any = true;
    pos = skip(s, end, " ,");
    if (auto a = match_token(s, pos, "and"); a != std::string_view::npos)
      pos = skip(s, a, " ");
  }
  if (!any)
    return std::nullopt;
  return total;
}

/// A Unix time in seconds (9 to 11 digits) at `pos`, as seconds from now.
std::optional<int64_t> parse_epoch(std::string_view s, std::size_t pos,
                                   sys_seconds now) {
  auto p = pos;
  auto begin = p;
  auto v = integer(s, p, 11);
  if (!v || p - begin < 9 || (p < s.size() && (is_digit(s[p]) || s[p] == '.')))
    return std::nullopt;
  return *v - now;
}

/// Separators between a key and its value: `"resets_in_seconds": 7980`.
constexpr std::string_view key_value_separators = " \t\"':=";

/// Whether a trigger word may start at `pos`: the first letter of a word
/// ("preset" has no "reset").
bool may_trigger(std::string_view s, std::size_t pos) {
  auto c = lower(s[pos]);
  return (c == 'r' || c == 't' || c == 'l') &&
         (pos == 0 || !is_alpha(s[pos - 1]));
}

/// The reset a trigger at `pos` announces, seconds from now (may be
/// negative), or nullopt when there is no trigger or no value there.
std::optional<int64_t> reset_at(std::string_view s, std::size_t pos,
                                sys_seconds now) {
  // Seconds fields: resets_in_seconds (OpenAI), reset_after_seconds.
  for (std::string_view key : {"resets_in_seconds", "resetsinseconds",
                               "reset_after_seconds", "resetafterseconds"}) {
    if (auto e = match_word(s, pos, key); e != std::string_view::npos) {
      auto p = skip(s, e, key_value_separators);
      auto begin = p;
      auto v = integer(s, p, 9);
      if (!v || p == begin)
        return std::nullopt;
      return *v;
    }
  }
  // Epoch fields: resets_at / resetsAt (OpenAI, Claude's rate_limit_info).
  for (std::string_view key : {"resets_at", "resetsat", "reset_at", "resetat"})
    if (auto e = match_word(s, pos, key); e != std::string_view::npos) {
      auto p = skip(s, e, key_value_separators);
      if (auto epoch = parse_epoch(s, p, now))
        return epoch;
      return parse_absolute(s, p, now); // an ISO timestamp
    }
  // Claude Code's old "Claude AI usage limit reached|1700000000".
  if (auto e = match_word(s, pos, "limit reached|");
      e != std::string_view::npos)
    return parse_epoch(s, e, now);
  auto phrase_end = std::string_view::npos;
  if (auto e = match_word(s, pos, "resets"); e != std::string_view::npos)
    phrase_end = e;
  else if (auto e2 = match_word(s, pos, "reset"); e2 != std::string_view::npos)
    phrase_end = e2;
  else if (auto e3 = match_word(s, pos, "try again");
           e3 != std::string_view::npos)
    phrase_end = e3;
  if (phrase_end == std::string_view::npos ||
      (phrase_end < s.size() && is_alpha(s[phrase_end])))
    return std::nullopt;
  auto p = skip(s, phrase_end, " :");
  if (auto in = match_token(s, p, "in"); in != std::string_view::npos)
    if (auto span = parse_span(s, skip(s, in, " ")))
      return span;
  for (std::string_view word : {"at", "on"})
    if (auto e = match_token(s, p, word); e != std::string_view::npos) {
      p = skip(s, e, " ");
      break;
    }
  return parse_absolute(s, p, now);
}

/// Whether `s` starts with a word `reset_at` reads.
bool is_trigger(std::string_view s) {
  for (std::string_view word : {"reset", "try again", "limit reached|"})
    if (match_word(s, 0, word) != std::string_view::npos)
      return true;
  return false;
}

} // namespace

std::optional<double>
parse_quota_reset(std::string_view line,
                  std::chrono::system_clock::time_point now) {
  sys_seconds now_s =
    std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count();
  int triggers = 0;
  for (std::size_t pos = 0; pos < line.size(); ++pos) {
    if (!may_trigger(line, pos))
      continue;
    // Each trigger reads at most `max_reset_text` bytes after it.
    auto window = line.substr(pos, max_reset_text);
    if (!is_trigger(window))
      continue;
    if (++triggers > max_triggers_per_line)
      break;
    auto secs = reset_at(window, 0, now_s);
    if (!secs)
      continue;
    if (*secs < 0)
      continue; // a reset in the past says nothing about the future
    return static_cast<double>(
      std::min<int64_t>(*secs, static_cast<int64_t>(max_quota_reset_s)));
  }
  return std::nullopt;
}

} // namespace tasksup

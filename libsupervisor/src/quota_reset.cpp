// When a usage or plan limit resets (quota_exhausted; docs/BEHAVIOUR.md,
// Failure classes): parses the reset the agent CLIs print ("resets 3:10am
// (Europe/Berlin)", "try again at Nov 28th, 2026 2:10 AM", "resets_in_seconds":
// 7980) into seconds from an explicit `now`. Zone names are read from the
// system tz database
// (/usr/share/zoneinfo, TZif files) per call: no global state, no TZ
// variable, so it is safe from any thread.
#include "tasksup/supervisor/classifier.hpp"

#include "text_scan.hpp"

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

/// Unix time in seconds; days are Unix days (0 = 1970-01-01).
using sys_seconds = int64_t;

constexpr int64_t day_s = 86400;

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
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
ymd civil_from_days(int64_t z) {
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

bool is_leap(int64_t y) {
  return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

unsigned last_day_of(int64_t y, unsigned m) {
  constexpr unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/// 0 = Sunday.
unsigned weekday_of(int64_t days) {
  return static_cast<unsigned>(((days + 4) % 7 + 7) % 7);
}

/// How far after a trigger word a reset may be written ("resets at Nov
/// 28th, 2026 2:10 AM (America/Los_Angeles)"): bounds the work per trigger.
constexpr std::size_t max_reset_text = 96;

/// Longest zone name looked up (the longest IANA name is ~32 bytes).
constexpr std::size_t max_zone_name = 64;

/// Most triggers ("resets", "try again", ...) read in one line: each may
/// look up a zone file, so a line made of triggers costs a bounded amount.
constexpr int max_triggers_per_line = 16;

/// Largest TZif file read (the biggest real one is ~4 KB).
constexpr std::size_t max_tzif_bytes = 256 * 1024;

constexpr std::string_view zoneinfo_dir = "/usr/share/zoneinfo/";

/// `word` at `pos` and not followed by a letter.
std::size_t match_token(std::string_view s, std::size_t pos,
                        std::string_view word) {
  auto end = match_word(s, pos, word);
  if (end == std::string_view::npos || (end < s.size() && is_alpha(s[end])))
    return std::string_view::npos;
  return end;
}

std::size_t skip(std::string_view s, std::size_t pos, std::string_view set) {
  while (pos < s.size() && set.find(s[pos]) != std::string_view::npos)
    ++pos;
  return pos;
}

/// An unsigned integer of 1..`max_digits` digits at `pos`; advances `pos`.
/// Fails on more digits, so no value overflows.
std::optional<int64_t> integer(std::string_view s, std::size_t& pos,
                               std::size_t max_digits) {
  int64_t value = 0;
  std::size_t n = 0;
  while (pos < s.size() && is_digit(s[pos])) {
    if (++n > max_digits)
      return std::nullopt;
    value = value * 10 + (s[pos] - '0');
    ++pos;
  }
  if (n == 0)
    return std::nullopt;
  return value;
}

// --- time zones -----------------------------------------------------------

/// A POSIX TZ rule date `Mm.w.d[/time]`: the d-th weekday (0 = Sunday) of
/// week w (5 = last) of month m, at `time_s` local time.
struct posix_date {
  unsigned month = 0;
  unsigned week = 0;
  unsigned weekday = 0;
  int64_t time_s = 7200;
};

/// The footer of a TZif file ("CET-1CEST,M3.5.0,M10.5.0/3"): how the zone
/// keeps time after its last listed transition.
struct posix_tz {
  int64_t std_offset_s = 0; // east of UTC
  bool has_dst = false;
  int64_t dst_offset_s = 0;
  posix_date start;
  posix_date end;
};

bool skip_tz_name(std::string_view s, std::size_t& pos) {
  if (pos < s.size() && s[pos] == '<') {
    auto close = s.find('>', pos);
    if (close == std::string_view::npos)
      return false;
    pos = close + 1;
    return true;
  }
  auto begin = pos;
  while (pos < s.size() && is_alpha(s[pos]))
    ++pos;
  return pos - begin >= 3;
}

/// `[+-]hh[:mm[:ss]]` in seconds, sign as written.
std::optional<int64_t> tz_hms(std::string_view s, std::size_t& pos) {
  int64_t sign = 1;
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-'))
    sign = s[pos++] == '-' ? -1 : 1;
  auto h = integer(s, pos, 3);
  if (!h || *h > 167)
    return std::nullopt;
  int64_t total = *h * 3600;
  for (int64_t unit : {60, 1}) {
    if (pos + 1 < s.size() && s[pos] == ':' && is_digit(s[pos + 1])) {
      ++pos;
      auto v = integer(s, pos, 2);
      if (!v || *v > 59)
        return std::nullopt;
      total += *v * unit;
    }
  }
  return sign * total;
}

std::optional<posix_date> tz_rule_date(std::string_view s, std::size_t& pos) {
  // Only the `Mm.w.d` form: every zone of the tz database uses it.
  if (pos >= s.size() || s[pos] != 'M')
    return std::nullopt;
  ++pos;
  posix_date d;
  auto m = integer(s, pos, 2);
  if (!m || *m < 1 || *m > 12 || pos >= s.size() || s[pos++] != '.')
    return std::nullopt;
  auto w = integer(s, pos, 1);
  if (!w || *w < 1 || *w > 5 || pos >= s.size() || s[pos++] != '.')
    return std::nullopt;
  auto wd = integer(s, pos, 1);
  if (!wd || *wd > 6)
    return std::nullopt;
  d.month = static_cast<unsigned>(*m);
  d.week = static_cast<unsigned>(*w);
  d.weekday = static_cast<unsigned>(*wd);
  if (pos < s.size() && s[pos] == '/') {
    ++pos;
    auto t = tz_hms(s, pos);
    if (!t)
      return std::nullopt;
    d.time_s = *t;
  }
  return d;
}

std::optional<posix_tz> parse_posix_tz(std::string_view s) {
  posix_tz tz;
  std::size_t pos = 0;
  if (!skip_tz_name(s, pos))
    return std::nullopt;
  auto off = tz_hms(s, pos);
  if (!off)
    return std::nullopt;
  tz.std_offset_s = -*off; // POSIX counts west of UTC
  if (pos == s.size())
    return tz;
  if (!skip_tz_name(s, pos))
    return std::nullopt;
  tz.has_dst = true;
  tz.dst_offset_s = tz.std_offset_s + 3600;
  if (pos < s.size() && s[pos] != ',') {
    auto dst = tz_hms(s, pos);
    if (!dst)
      return std::nullopt;
    tz.dst_offset_s = -*dst;
  }
  if (pos >= s.size() || s[pos++] != ',')
    return std::nullopt;
  auto start = tz_rule_date(s, pos);
  if (!start || pos >= s.size() || s[pos++] != ',')
    return std::nullopt;
  auto end = tz_rule_date(s, pos);
  if (!end || pos != s.size())
    return std::nullopt;
  tz.start = *start;
  tz.end = *end;
  return tz;
}

/// The UTC instant at which `d` happens in `year`, in a zone `offset_s` east
/// of UTC.
sys_seconds rule_instant(int64_t year, const posix_date& d, int64_t offset_s) {
  auto first = days_from_civil(year, d.month, 1);
  auto day = 1 + (d.weekday + 7 - weekday_of(first)) % 7 + (d.week - 1) * 7;
  auto last = last_day_of(year, d.month);
  while (day > last)
    day -= 7;
  return (first + day - 1) * day_s + d.time_s - offset_s;
}

int64_t posix_offset_at(const posix_tz& tz, sys_seconds t) {
  if (!tz.has_dst)
    return tz.std_offset_s;
  auto year = civil_from_days(floor_div(t + tz.std_offset_s, day_s)).year;
  auto start = rule_instant(year, tz.start, tz.std_offset_s);
  auto end = rule_instant(year, tz.end, tz.dst_offset_s);
  bool dst = start < end ? (t >= start && t < end) : (t >= start || t < end);
  return dst ? tz.dst_offset_s : tz.std_offset_s;
}

uint32_t be32(const std::string& b, std::size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}

int64_t be64(const std::string& b, std::size_t at) {
  return static_cast<int64_t>(static_cast<uint64_t>(be32(b, at)) << 32 |
                              be32(b, at + 4));
}

/// Whether `name` may name a file under the zoneinfo directory: an IANA
/// name ("Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+2"),
/// never a path that leaves it.
bool valid_zone_name(std::string_view name) {
  if (name.empty() || name.size() > max_zone_name || name.front() == '/' ||
      name.find("..") != std::string_view::npos)
    return false;
  for (char c : name)
    if (!(is_alpha(c) || is_digit(c) || c == '/' || c == '_' || c == '-' ||
          c == '+'))
      return false;
  return true;
}

/// The UTC offset (seconds east) of the zone `name` at `t`, from its TZif
/// file; nullopt when there is no such zone or the file is not TZif.
std::optional<int64_t> zone_offset_at(std::string_view name, sys_seconds t) {
  if (!valid_zone_name(name))
    return std::nullopt;
  std::ifstream in{std::string{zoneinfo_dir} + std::string{name},
                   std::ios::binary};
  if (!in)
    return std::nullopt;
  std::string b(max_tzif_bytes + 1, '\0');
  in.read(b.data(), static_cast<std::streamsize>(b.size()));
  auto size = static_cast<std::size_t>(in.gcount());
  if (size > max_tzif_bytes || size < 44 || b.compare(0, 4, "TZif") != 0)
    return std::nullopt;
  b.resize(size);
  // Header: magic, version, 15 reserved, then six counts.
  auto counts = [&](std::size_t at) {
    std::array<std::size_t, 6> c{};
    for (std::size_t i = 0; i < 6; ++i)
      c[i] = be32(b, at + 20 + 4 * i);
    return c;
  };
  std::size_t at = 0;
  auto c = counts(at);
  std::size_t time_size = 4;
  auto block = [&](const std::array<std::size_t, 6>& k, std::size_t ts) {
    // isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
    return k[3] * ts + k[3] + k[4] * 6 + k[5] + k[2] * (ts + 4) + k[1] + k[0];
  };
  if (b[4] >= '2') {
    at = 44 + block(c, 4);
    if (at + 44 > size || b.compare(at, 4, "TZif") != 0)
      return std::nullopt;
    c = counts(at);
    time_size = 8;
  }
  auto timecnt = c[3];
  auto typecnt = c[4];
  auto data = at + 44;
  if (typecnt == 0 || typecnt > 256 || timecnt > 100000 ||
      data + block(c, time_size) > size)
    return std::nullopt;
  auto idx_at = data + timecnt * time_size;
  auto types_at = idx_at + timecnt;
  auto type_offset = [&](std::size_t type) -> std::optional<int64_t> {
    if (type >= typecnt)
      return std::nullopt;
    return static_cast<int32_t>(be32(b, types_at + type * 6));
  };
  auto when = t;
  // The last transition at or before `t` (transitions are sorted).
  std::size_t lo = 0;
  std::size_t hi = timecnt;
  while (lo < hi) {
    auto mid = lo + (hi - lo) / 2;
    auto tt = time_size == 8 ? be64(b, data + mid * 8)
                             : static_cast<int32_t>(be32(b, data + mid * 4));
    if (tt <= when)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == timecnt && time_size == 8) {
    // After the last transition: the footer's rule, when there is one.
    auto footer_at = data + block(c, time_size);
    if (footer_at < size && b[footer_at] == '\n') {
      auto nl = b.find('\n', footer_at + 1);
      if (nl != std::string::npos && nl > footer_at + 1)
        if (auto tz = parse_posix_tz(
              std::string_view{b}.substr(footer_at + 1, nl - footer_at - 1)))
          return posix_offset_at(*tz, t);
    }
  }
  if (lo == 0)
    return type_offset(0);
  return type_offset(static_cast<unsigned char>(b[idx_at + lo - 1]));
}

/// A zone as written after a time: "UTC", "GMT", "Z", "+02:00", "UTC+2",
/// or an IANA name. `fixed_s` is set for fixed offsets, `name` otherwise.
struct zone {
  std::optional<int64_t> fixed_s;
  std::string_view name;
};

/// The UTC instant of local wall time `local` in `z`; nullopt for an
/// unknown zone name.
std::optional<sys_seconds> to_utc(const zone& z, sys_seconds local) {
  if (z.fixed_s)
    return local - *z.fixed_s;
  // The offset at the local time read as UTC, then at the instant that
  // gives: exact except in the hour a clock change skips or repeats.
  auto first = zone_offset_at(z.name, local);
  if (!first)
    return std::nullopt;
  auto guess = local - *first;
  auto second = zone_offset_at(z.name, guess);
  if (!second)
    return std::nullopt;
  return local - *second;
}

std::optional<int64_t> offset_now(const zone& z, sys_seconds now) {
  if (z.fixed_s)
    return z.fixed_s;
  return zone_offset_at(z.name, now);
}

/// `+HH[:MM]` / `-HHMM` at `pos`, seconds east.
std::optional<int64_t> numeric_offset(std::string_view s, std::size_t& pos) {
  if (pos >= s.size() || (s[pos] != '+' && s[pos] != '-'))
    return std::nullopt;
  int64_t sign = s[pos] == '-' ? -1 : 1;
  auto p = pos + 1;
  auto begin = p;
  auto h = integer(s, p, 4);
  if (!h)
    return std::nullopt;
  int64_t hours = *h;
  int64_t minutes = 0;
  if (p - begin > 2) { // +0200
    if (p - begin != 4)
      return std::nullopt;
    hours = *h / 100;
    minutes = *h % 100;
  } else if (p + 1 < s.size() && s[p] == ':' && is_digit(s[p + 1])) {
    ++p;
    auto m = integer(s, p, 2);
    if (!m)
      return std::nullopt;
    minutes = *m;
  }
  if (hours > 14 || minutes > 59)
    return std::nullopt;
  pos = p;
  return sign * (hours * 3600 + minutes * 60);
}

/// A zone after a time, optionally in parentheses; UTC when none is
/// written (the agent's own zone is unknown; containers run in UTC).
zone parse_zone(std::string_view s, std::size_t& pos) {
  auto p = skip(s, pos, " \t");
  bool paren = p < s.size() && s[p] == '(';
  if (paren)
    ++p;
  zone z;
  auto done = [&](std::size_t end) {
    if (paren) {
      if (end >= s.size() || s[end] != ')')
        return false;
      ++end;
    }
    pos = end;
    return true;
  };
  if (auto off = numeric_offset(s, p)) {
    z.fixed_s = off;
    if (done(p))
      return z;
    return zone{0, {}};
  }
  for (std::string_view utc : {"utc", "gmt", "z"}) {
    auto end = match_token(s, p, utc);
    if (end == std::string_view::npos)
      continue;
    z.fixed_s = 0;
    if (auto e = end; auto off = numeric_offset(s, e)) {
      z.fixed_s = off;
      end = e;
    }
    if (done(end))
      return z;
    return zone{0, {}};
  }
  // An IANA name: Area/Location, letters, digits, '_', '-', '+', '/'.
  auto end = p;
  while (end < s.size() && end - p <= max_zone_name &&
         (is_alpha(s[end]) || is_digit(s[end]) || s[end] == '/' ||
          s[end] == '_' || s[end] == '-' || s[end] == '+'))
    ++end;
  auto name = s.substr(p, end - p);
  if (name.find('/') != std::string_view::npos && valid_zone_name(name) &&
      is_alpha(name.front())) {
    z.name = name;
    if (done(end))
      return z;
    return z; // "(Europe/Berlin" cut short: the name is still the zone
  }
  return zone{0, {}};
}

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

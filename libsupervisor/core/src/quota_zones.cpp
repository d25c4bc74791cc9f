// Time zones for the quota-reset parser and the schedules' cron times
// (local_to_utc): POSIX TZ rules, the system's tz
// database (/usr/share/zoneinfo, TZif files, read per call: no global state,
// no TZ variable), and a zone as an agent writes it after a time ("UTC+2",
// "(Europe/Berlin)", "+02:00"); with the scanning helpers both files use.

#include "quota_calendar.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <string>
#include <vector>

namespace tasksup::detail {

/// Longest zone name looked up (the longest IANA name is ~32 bytes).
constexpr std::size_t max_zone_name = 64;

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

namespace {

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

} // namespace

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

std::optional<local_instants> local_to_utc(const zone& z, sys_seconds local) {
  if (z.fixed_s) {
    auto t = local - *z.fixed_s;
    return local_instants{t, t, false};
  }
  // The offsets in force around `local`; each gives one candidate instant,
  // which shows `local` when the zone has that offset at that instant.
  auto before = zone_offset_at(z.name, local - day_s);
  auto after = zone_offset_at(z.name, local + day_s);
  if (!before || !after)
    return std::nullopt;
  std::optional<local_instants> out;
  for (auto offset : {*before, *after}) {
    auto t = local - offset;
    auto at = zone_offset_at(z.name, t);
    if (!at)
      return std::nullopt;
    if (*at != offset)
      continue;
    if (!out)
      out = local_instants{t, t, false};
    out->first = std::min(out->first, t);
    out->last = std::max(out->last, t);
  }
  if (out)
    return out;
  // Skipped: the clocks jumped from `before` to `after` (> `before`) at an
  // instant in (local - after, local - before]; found by bisection (at most
  // ~17 reads for a jump of a day, 12 for the usual hour).
  auto lo = local - *after;  // still on `before`
  auto hi = local - *before; // already on `after`
  if (lo >= hi)
    return std::nullopt;
  while (hi - lo > 1) {
    auto mid = lo + (hi - lo) / 2;
    auto at = zone_offset_at(z.name, mid);
    if (!at)
      return std::nullopt;
    (*at == *after ? hi : lo) = mid;
  }
  return local_instants{hi, hi, true};
}

namespace {

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

} // namespace

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

} // namespace tasksup::detail

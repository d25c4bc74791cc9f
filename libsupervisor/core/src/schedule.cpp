// Schedules: intervals and cron expressions, when they fire (in a zone's
// wall time), what a fire time does while a run is still going, and which
// missed fire times run after an outage (docs/BEHAVIOUR.md, Schedules:
// timing). The zones come from quota_zones.cpp (`local_to_utc`).

#include "tasksup/supervisor/schedule.hpp"

#include "config_reader.hpp"
#include "quota_calendar.hpp"
#include "tasksup/supervisor/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <utility>

namespace tasksup {

namespace {

using detail::civil_from_days;
using detail::day_s;
using detail::floor_div;
using detail::local_to_utc;
using detail::offset_now;
using detail::quote;
using detail::sys_seconds;
using detail::weekday_of;

// -- limits -------------------------------------------------------------------

/// Longest `every` text read ("366d" needs 4 bytes; "1d23h59m59s999ms" 16).
constexpr std::size_t max_interval_text = 32;

/// Longest cron expression read.
constexpr std::size_t max_cron_text = 256;

/// How many days a search for a matching day looks at. The longest wait
/// between two fire times of an accepted expression is `0 0 29 2 *`'s from
/// 29 February 2096 to 29 February 2104 (2921 days; 2100 is no leap year).
constexpr int64_t max_search_days = 9 * 366;

/// How many candidate wall times a search maps to UTC before giving up.
/// Only those of an hour a clock change repeats are passed over, and no zone
/// repeats a whole day.
constexpr int max_candidates = 24 * 60 + 1;

/// The last second of 9999-12-31 UTC: the latest `now_s` read.
constexpr sys_seconds max_time_s = 253402300799;

/// `t_s` as whole seconds (floored), when it is a time from 1970 to 9999.
std::optional<sys_seconds> whole_seconds(double t_s) {
  if (!(t_s >= 0 && t_s <= static_cast<double>(max_time_s)))
    return std::nullopt;
  return static_cast<sys_seconds>(std::floor(t_s));
}

detail::zone zone_of(const std::string& name) {
  if (name == "UTC")
    return detail::zone{0, {}};
  return detail::zone{std::nullopt, name};
}

error failure(std::string what) {
  return error{std::string{}, std::string{}, std::move(what)};
}

// -- intervals ----------------------------------------------------------------

struct duration_unit {
  std::string_view name;
  int64_t ms;
};

/// Largest first; `unit_at` matches "ms" (the last) before "m".
constexpr duration_unit duration_units[] = {
  {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};

/// The unit at `pos`: its index in `duration_units`, or nullopt.
std::optional<std::size_t> unit_at(std::string_view s, std::size_t pos) {
  if (s.substr(pos, 2) == "ms")
    return 4;
  for (std::size_t i = 0; i < 4; ++i)
    if (s.substr(pos, 1) == duration_units[i].name)
      return i;
  return std::nullopt;
}

// -- cron fields --------------------------------------------------------------

/// One of the five fields: its name, range and the names its values have.
struct field_info {
  std::string_view name;
  unsigned lo;
  unsigned hi;
  /// Lowercase names of lo, lo+1, ... (empty: numbers only).
  const std::string_view* names;
  std::size_t name_count;
  /// What `*` covers: hi, except for day-of-week (7 is only Sunday again).
  unsigned star_hi;
};

constexpr std::string_view month_names[] = {"jan", "feb", "mar", "apr",
                                            "may", "jun", "jul", "aug",
                                            "sep", "oct", "nov", "dec"};
constexpr std::string_view weekday_names[] = {"sun", "mon", "tue", "wed",
                                              "thu", "fri", "sat"};

constexpr field_info cron_field_infos[] = {
  {"minute", 0, 59, nullptr, 0, 59},
  {"hour", 0, 23, nullptr, 0, 23},
  {"day-of-month", 1, 31, nullptr, 0, 31},
  {"month", 1, 12, month_names, 12, 12},
  {"day-of-week", 0, 7, weekday_names, 7, 6},
};

constexpr std::uint64_t bits(unsigned lo, unsigned hi) {
  std::uint64_t out = 0;
  for (auto i = lo; i <= hi; ++i)
    out |= std::uint64_t{1} << i;
  return out;
}

constexpr std::uint32_t all_days_of_month = bits(1, 31);
constexpr std::uint8_t all_days_of_week = bits(0, 6);

/// Reads one cron field into a bit set over its values; errors say what is
/// wrong, the caller adds which field.
class field_reader {
public:
  explicit field_reader(const field_info& info) : info_(info) {}

  expected<std::uint64_t> read(std::string_view text) const {
    std::uint64_t out = 0;
    std::size_t begin = 0;
    while (true) {
      auto comma = text.find(',', begin);
      auto item = text.substr(begin, comma == std::string_view::npos
                                       ? std::string_view::npos
                                       : comma - begin);
      auto set = read_item(item);
      if (!set)
        return set;
      out |= *set;
      if (comma == std::string_view::npos)
        return out;
      begin = comma + 1;
    }
  }

private:
  expected<std::uint64_t> read_item(std::string_view item) const {
    if (item.empty())
      return failure("an empty list item (two commas, or one at an end)");
    auto slash = item.find('/');
    auto base = item.substr(0, slash);
    unsigned lo = info_.lo;
    unsigned hi = info_.star_hi;
    bool ranged = true;
    if (base != "*") {
      auto dash = base.find('-');
      auto first = value(base.substr(0, dash));
      if (!first)
        return first.error();
      lo = hi = *first;
      ranged = dash != std::string_view::npos;
      if (ranged) {
        auto last = value(base.substr(dash + 1));
        if (!last)
          return last.error();
        hi = *last;
        if (lo > hi)
          return failure("the range " + quote(base) +
                         " runs backwards (ranges do not wrap around)");
      }
    }
    unsigned step = 1;
    if (slash != std::string_view::npos) {
      // `base` is a value here (checked above), safe to show as written.
      if (!ranged)
        return failure("a step needs a range: write " + std::string{base} +
                       "-" + std::to_string(info_.star_hi) + "/... or */...");
      auto s = number(item.substr(slash + 1));
      auto size = info_.star_hi - info_.lo + 1;
      if (!s || *s == 0 || *s > size)
        return failure("the step " + quote(item.substr(slash + 1)) +
                       " is not a number from 1 to " + std::to_string(size));
      step = static_cast<unsigned>(*s);
    }
    std::uint64_t out = 0;
    for (auto v = lo; v <= hi; v += step)
      out |= std::uint64_t{1} << v;
    return out;
  }

  /// A value of the field: a number in its range, or a name.
  expected<unsigned> value(std::string_view text) const {
    if (text.empty())
      return failure("a range needs a value on both sides of '-'");
    if (detail::is_alpha(text.front())) {
      for (std::size_t i = 0; i < info_.name_count; ++i) {
        const auto& name = info_.names[i];
        if (text.size() == name.size() &&
            detail::match_word(text, 0, name) == text.size())
          return static_cast<unsigned>(info_.lo + i);
      }
      if (info_.name_count == 0)
        return failure("expected a number, got " + quote(text));
      return failure("unknown name " + quote(text) + " (expected " +
                     std::string{info_.names[0]} + "-" +
                     std::string{info_.names[info_.name_count - 1]} +
                     ", in any case)");
    }
    auto n = number(text);
    if (!n)
      return failure("expected a number or a range, got " + quote(text));
    if (*n < info_.lo || *n > info_.hi)
      return failure(std::string{text} + " is outside " +
                     std::to_string(info_.lo) + "-" + std::to_string(info_.hi));
    return static_cast<unsigned>(*n);
  }

  /// Digits only, at most 4 (more is out of every range anyway).
  static std::optional<unsigned> number(std::string_view text) {
    if (text.empty() || text.size() > 4)
      return std::nullopt;
    unsigned out = 0;
    for (char c : text) {
      if (!detail::is_digit(c))
        return std::nullopt;
      out = out * 10 + static_cast<unsigned>(c - '0');
    }
    return out;
  }

  const field_info& info_;
};

/// The blank-separated words of `text`.
std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (true) {
    pos = detail::skip(text, pos, " \t");
    if (pos == text.size())
      return out;
    auto end = text.find_first_of(" \t", pos);
    if (end == std::string_view::npos)
      end = text.size();
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

/// Whether some day of `days_of_month` exists in some month of `months`
/// (February counting its 29th).
bool some_day_exists(std::uint32_t days_of_month, std::uint16_t months) {
  for (unsigned m = 1; m <= 12; ++m)
    if ((months >> m & 1) != 0 &&
        (days_of_month & bits(1, detail::last_day_of(2000, m))) != 0)
      return true;
  return false;
}

// -- searching the wall clock -------------------------------------------------

/// The lowest set bit of `x` (not 0).
int lowest_bit(std::uint64_t x) {
  int i = 0;
  while ((x >> i & 1) == 0)
    ++i;
  return i;
}

/// The highest set bit of `x` (not 0).
int highest_bit(std::uint64_t x) {
  int i = 63;
  while ((x >> i & 1) == 0)
    --i;
  return i;
}

/// The first minute of the day from `from` (0-1439) on that `f` selects.
std::optional<int64_t> first_minute_from(const cron_fields& f, int64_t from) {
  for (auto h = from / 60; h < 24; ++h) {
    if ((f.hours >> h & 1) == 0)
      continue;
    auto m0 = h == from / 60 ? from % 60 : 0;
    auto left = f.minutes & (~std::uint64_t{0} << m0);
    if (left != 0)
      return h * 60 + lowest_bit(left);
  }
  return std::nullopt;
}

/// The last minute of the day up to `to` (0-1439) that `f` selects.
std::optional<int64_t> last_minute_to(const cron_fields& f, int64_t to) {
  for (auto h = to / 60; h >= 0; --h) {
    if ((f.hours >> h & 1) == 0)
      continue;
    auto m1 = h == to / 60 ? to % 60 : 59;
    auto upto = f.minutes & (~std::uint64_t{0} >> (63 - m1));
    if (upto != 0)
      return h * 60 + highest_bit(upto);
  }
  return std::nullopt;
}

bool day_selected(const cron_fields& f, int64_t day) {
  auto date = civil_from_days(day);
  return f.matches_day(date.month, date.day, weekday_of(day));
}

/// The first wall time after `local` (a wall clock read as if UTC) at a
/// whole minute `f` selects.
std::optional<sys_seconds> next_local(const cron_fields& f, sys_seconds local) {
  auto start = (floor_div(local, 60) + 1) * 60;
  auto day = floor_div(start, day_s);
  auto from = (start - day * day_s) / 60;
  for (int64_t i = 0; i < max_search_days; ++i, ++day, from = 0)
    if (day_selected(f, day))
      if (auto m = first_minute_from(f, from))
        return day * day_s + *m * 60;
  return std::nullopt;
}

/// The last wall time at or before `local` at a whole minute `f` selects.
std::optional<sys_seconds> last_local(const cron_fields& f, sys_seconds local) {
  auto start = floor_div(local, 60) * 60;
  auto day = floor_div(start, day_s);
  auto to = (start - day * day_s) / 60;
  for (int64_t i = 0; i < max_search_days; ++i, --day, to = 24 * 60 - 1)
    if (day_selected(f, day))
      if (auto m = last_minute_to(f, to))
        return day * day_s + *m * 60;
  return std::nullopt;
}

std::optional<sys_seconds> cron_next(const cron_timing& c, sys_seconds now) {
  auto z = zone_of(c.time_zone);
  auto offset = offset_now(z, now);
  if (!offset)
    return std::nullopt;
  // Wall times map to instants in order (a skipped one to the end of its
  // gap, a repeated one to its first occurrence), so the first candidate
  // after `now`'s own wall time whose instant is after `now` is the answer;
  // only in a repeated hour do earlier candidates map to earlier instants.
  auto local = now + *offset;
  for (int i = 0; i < max_candidates; ++i) {
    auto candidate = next_local(c.fields, local);
    if (!candidate)
      return std::nullopt;
    auto at = local_to_utc(z, *candidate);
    if (!at)
      return std::nullopt;
    if (at->first > now)
      return at->first;
    local = *candidate;
  }
  return std::nullopt;
}

std::optional<sys_seconds> cron_last(const cron_timing& c, sys_seconds t) {
  auto z = zone_of(c.time_zone);
  auto offset = offset_now(z, t);
  auto offset_before = offset_now(z, t - day_s);
  if (!offset || !offset_before)
    return std::nullopt;
  // A wall time of an hour the clocks repeated within the last day maps to
  // its first occurrence, which may be before `t` though the wall time is
  // after `t`'s: start from the later of the two wall times.
  auto local = t + std::max(*offset, *offset_before);
  for (int i = 0; i < max_candidates; ++i) {
    auto candidate = last_local(c.fields, local);
    if (!candidate)
      return std::nullopt;
    auto at = local_to_utc(z, *candidate);
    if (!at)
      return std::nullopt;
    if (at->first <= t)
      return at->first;
    local = *candidate - 1;
  }
  return std::nullopt;
}

constexpr overlap_policy overlap_policies[] = {
  overlap_policy::skip, overlap_policy::buffer_one, overlap_policy::allow_all,
  overlap_policy::cancel_other};

} // namespace

// -- timing -------------------------------------------------------------------

bool cron_fields::days_of_month_restricted() const noexcept {
  return (days_of_month & all_days_of_month) != all_days_of_month;
}

bool cron_fields::days_of_week_restricted() const noexcept {
  return (days_of_week & all_days_of_week) != all_days_of_week;
}

bool cron_fields::matches_day(unsigned month, unsigned day,
                              unsigned weekday) const noexcept {
  if (month < 1 || month > 12 || day < 1 || day > 31 || weekday > 6 ||
      (months >> month & 1) == 0)
    return false;
  bool dom = (days_of_month >> day & 1) != 0;
  bool dow = (days_of_week >> weekday & 1) != 0;
  if (days_of_month_restricted() && days_of_week_restricted())
    return dom || dow;
  return dom && dow;
}

expected<interval_timing> parse_interval(std::string_view text) {
  auto bad = [&] {
    return failure("expected a duration such as \"30s\", \"5m\", \"2h\", "
                   "\"1h30m\" or \"1d\", got " +
                   quote(text));
  };
  if (text.empty() || text.size() > max_interval_text)
    return bad();
  int64_t total_ms = 0;
  std::size_t next_unit = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    // 9 digits of days stay far from overflow: 10^9 x 86400000 < 2^63 / 100.
    auto n = detail::integer(text, pos, 9);
    if (!n)
      return bad();
    auto u = unit_at(text, pos);
    if (!u)
      return bad();
    if (*u < next_unit)
      return failure("units go from the largest to the smallest, each at "
                     "most once (\"1h30m\"), got " +
                     quote(text));
    total_ms += *n * duration_units[*u].ms;
    next_unit = *u + 1;
    pos += duration_units[*u].name.size();
  }
  if (total_ms < min_interval_s * 1000)
    return failure(quote(text) + " is shorter than the shortest interval, 1s");
  if (total_ms > max_interval_s * 1000)
    return failure(quote(text) + " is longer than the longest interval, 366d");
  if (total_ms % 1000 != 0)
    return failure(quote(text) + " is not a whole number of seconds");
  auto s = total_ms / 1000;
  return interval_timing{s};
}

expected<cron_fields> parse_cron_fields(std::string_view expression) {
  if (expression.size() > max_cron_text)
    return failure("a cron expression of more than " +
                   std::to_string(max_cron_text) + " bytes");
  auto fields = words(expression);
  if (!fields.empty() && fields.front().front() == '@')
    return failure("macros such as " + quote(fields.front()) +
                   " are not supported: write the five fields (@daily is "
                   "\"0 0 * * *\")");
  if (fields.size() != 5)
    return failure("expected 5 fields (minute hour day-of-month month "
                   "day-of-week), got " +
                   std::to_string(fields.size()));
  std::array<std::uint64_t, 5> sets{};
  for (std::size_t i = 0; i < 5; ++i) {
    const auto& info = cron_field_infos[i];
    auto set = field_reader{info}.read(fields[i]);
    if (!set)
      return failure(std::string{info.name} + " field " + quote(fields[i]) +
                     ": " + set.error().what);
    sets[i] = *set;
  }
  cron_fields out;
  out.minutes = sets[0];
  out.hours = static_cast<std::uint32_t>(sets[1]);
  out.days_of_month = static_cast<std::uint32_t>(sets[2]);
  out.months = static_cast<std::uint16_t>(sets[3]);
  // 7 is Sunday again.
  out.days_of_week =
    static_cast<std::uint8_t>((sets[4] | sets[4] >> 7) & all_days_of_week);
  // With day-of-week restricted a day matches by its weekday alone, and
  // every month has every weekday; else the days must exist in the months.
  if (!out.days_of_week_restricted() &&
      !some_day_exists(out.days_of_month, out.months))
    return failure("day-of-month field " + quote(fields[2]) +
                   " names no day that month field " + quote(fields[3]) +
                   " has: the expression never fires");
  return out;
}

expected<cron_timing> parse_cron(std::string_view expression,
                                 std::string_view time_zone) {
  auto fields = parse_cron_fields(expression);
  if (!fields)
    return fields.error();
  cron_timing out;
  auto trimmed = detail::skip(expression, 0, " \t");
  out.expression = std::string{expression.substr(trimmed)};
  out.expression.erase(out.expression.find_last_not_of(" \t") + 1);
  out.fields = *fields;
  out.time_zone = std::string{time_zone};
  if (!offset_now(zone_of(out.time_zone), 0))
    return failure("unknown time zone " + quote(time_zone) +
                   " (expected \"UTC\" or an IANA name such as "
                   "\"Europe/Berlin\")");
  return out;
}

std::optional<double> next_after(const schedule_timing& timing, double now_s) {
  auto now = whole_seconds(now_s);
  if (!now)
    return std::nullopt;
  if (const auto* every = std::get_if<interval_timing>(&timing)) {
    if (every->every_s < 1)
      return std::nullopt;
    return static_cast<double>((floor_div(*now, every->every_s) + 1) *
                               every->every_s);
  }
  auto at = cron_next(std::get<cron_timing>(timing), *now);
  if (!at)
    return std::nullopt;
  return static_cast<double>(*at);
}

std::optional<double> last_at_or_before(const schedule_timing& timing,
                                        double t_s) {
  auto t = whole_seconds(t_s);
  if (!t)
    return std::nullopt;
  if (const auto* every = std::get_if<interval_timing>(&timing)) {
    if (every->every_s < 1)
      return std::nullopt;
    return static_cast<double>(floor_div(*t, every->every_s) * every->every_s);
  }
  auto at = cron_last(std::get<cron_timing>(timing), *t);
  if (!at)
    return std::nullopt;
  return static_cast<double>(*at);
}

// -- overlap ------------------------------------------------------------------

std::string_view to_string(overlap_policy x) noexcept {
  switch (x) {
    case overlap_policy::skip:
      return "skip";
    case overlap_policy::buffer_one:
      return "buffer_one";
    case overlap_policy::allow_all:
      return "allow_all";
    case overlap_policy::cancel_other:
      return "cancel_other";
  }
  return "skip";
}

std::optional<overlap_policy>
parse_overlap_policy(std::string_view str) noexcept {
  for (auto x : overlap_policies)
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(fire_decision x) noexcept {
  switch (x) {
    case fire_decision::start:
      return "start";
    case fire_decision::skip:
      return "skip";
    case fire_decision::buffer:
      return "buffer";
    case fire_decision::cancel_then_start:
      return "cancel_then_start";
  }
  return "skip";
}

fire_decision on_fire(overlap_policy policy, bool running,
                      bool waiting) noexcept {
  if (!running)
    return fire_decision::start;
  switch (policy) {
    case overlap_policy::skip:
      return fire_decision::skip;
    case overlap_policy::buffer_one:
      return waiting ? fire_decision::skip : fire_decision::buffer;
    case overlap_policy::allow_all:
      return fire_decision::start;
    case overlap_policy::cancel_other:
      // Already cancelling, with a start waiting: that one covers this.
      return waiting ? fire_decision::skip : fire_decision::cancel_then_start;
  }
  return fire_decision::skip;
}

// -- catch-up -----------------------------------------------------------------

catchup_plan plan_catchup(const schedule_timing& timing, double last_fired_s,
                          double now_s, int catchup) {
  catchup_plan out;
  if (!(now_s > last_fired_s))
    return out;
  auto limit = static_cast<std::size_t>(std::clamp(catchup, 0, max_catchup));
  // Walk back from `now_s`: the most recent missed fire times first, and no
  // more of them than are kept plus one (to know whether any are left out).
  for (auto t = now_s;;) {
    auto at = last_at_or_before(timing, t);
    if (!at || !(*at > last_fired_s))
      break;
    if (out.run_s.size() == limit) {
      out.dropped = true;
      break;
    }
    out.run_s.push_back(*at);
    t = *at - 1; // fire times are whole seconds
  }
  std::reverse(out.run_s.begin(), out.run_s.end());
  return out;
}

// -- schedule files -----------------------------------------------------------

expected<schedule_spec> parse_schedule(const boost::json::value& doc,
                                       std::string_view where) {
  using detail::reader;
  return detail::guarded([&] {
    reader r{where};
    const auto& obj = r.object(doc, "");
    r.check_keys(obj, "",
                 {"every", "cron", "time_zone", "overlap", "catchup", "task"});
    const auto* every = obj.if_contains("every");
    const auto* cron = obj.if_contains("cron");
    if (every != nullptr && cron != nullptr)
      r.fail("/cron", "\"cron\" and \"every\" exclude each other: give one");
    if (every == nullptr && cron == nullptr)
      r.fail("", "missing \"every\" or \"cron\" (one of them)");
    schedule_spec out;
    if (every != nullptr) {
      if (obj.contains("time_zone"))
        r.fail("/time_zone", "only a \"cron\" schedule has a time zone "
                             "(\"every\" counts from the Unix epoch)");
      auto timing = parse_interval(r.string(*every, "/every"));
      if (!timing)
        r.fail("/every", timing.error().what);
      out.timing = *timing;
    } else {
      auto text = r.string(*cron, "/cron");
      auto fields = parse_cron_fields(text);
      if (!fields)
        r.fail("/cron", fields.error().what);
      std::string zone = "UTC";
      if (const auto* v = obj.if_contains("time_zone"))
        zone = r.nonempty_string(*v, "/time_zone");
      auto timing = parse_cron(text, zone);
      if (!timing)
        r.fail("/time_zone", timing.error().what);
      out.timing = std::move(*timing);
    }
    if (const auto* v = obj.if_contains("overlap")) {
      std::vector<std::string_view> names;
      for (auto x : overlap_policies)
        names.push_back(to_string(x));
      out.overlap = detail::enum_value<overlap_policy>(
        r, *v, "/overlap", parse_overlap_policy, names);
    }
    if (const auto* v = obj.if_contains("catchup"))
      out.catchup = r.int_value(*v, "/catchup", 0, max_catchup);
    out.task = r.object(r.required(obj, "", "task"), "/task");
    return out;
  });
}

expected<schedule_spec> load_schedule_file(const std::string& path) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  return parse_schedule(*doc, path);
}

bool valid_schedule_name(std::string_view name) noexcept {
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  };
  return !name.empty() && name.size() <= max_schedule_name && name != "." &&
         name != ".." && std::all_of(name.begin(), name.end(), ok);
}

std::string schedule_run_id(std::string_view name, double due_s) {
  auto t = static_cast<std::time_t>(std::floor(due_s));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string out{name};
  out += '-';
  out += stamp;
  return out;
}

} // namespace tasksup

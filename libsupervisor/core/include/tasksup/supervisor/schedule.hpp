#pragma once

// When a schedule fires, and what it does when a fire time comes while its
// previous run is still going or after the node was down: the pure core the
// `schedule` command and the node will use (docs/BEHAVIOUR.md, Schedules:
// timing). No clock is read: every function takes `now_s`. Cron times in a
// zone other than UTC read the system tz database (/usr/share/zoneinfo), per
// call, as quota resets do.

#include "tasksup/supervisor/expected.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tasksup {

// -- timing -------------------------------------------------------------------

/// The shortest interval: 1 s (`"250ms"` is refused).
inline constexpr std::int64_t min_interval_s = 1;

/// The longest interval: 366 days.
inline constexpr std::int64_t max_interval_s = 366 * 86400;

/// `"every": "30s"`: fires at every multiple of `every_s` seconds since the
/// Unix epoch (Temporal's interval without a phase), so fire times do not
/// depend on when the schedule was made: `"1h"` fires on the hour (UTC),
/// `"1d"` at midnight UTC.
struct interval_timing {
  std::int64_t every_s = 0;
};

/// The values a five-field cron expression selects, one bit per value.
struct cron_fields {
  /// Bit m for minute m, 0-59.
  std::uint64_t minutes = 0;
  /// Bit h for hour h, 0-23.
  std::uint32_t hours = 0;
  /// Bit d for day d of the month, 1-31.
  std::uint32_t days_of_month = 0;
  /// Bit m for month m, 1-12.
  std::uint16_t months = 0;
  /// Bit d for weekday d, 0-6, 0 = Sunday (7 is read as 0).
  std::uint8_t days_of_week = 0;

  /// Whether day-of-month selects fewer than all of 1-31.
  bool days_of_month_restricted() const noexcept;

  /// Whether day-of-week selects fewer than all of 0-6.
  bool days_of_week_restricted() const noexcept;

  /// Whether the day `day` (1-31) of `month` (1-12), a `weekday` (0 =
  /// Sunday), is selected: when both day fields are restricted, a day
  /// matching either does (cron's rule); else it must match both.
  bool matches_day(unsigned month, unsigned day,
                   unsigned weekday) const noexcept;

  friend bool operator==(const cron_fields& x, const cron_fields& y) noexcept {
    return x.minutes == y.minutes && x.hours == y.hours &&
           x.days_of_month == y.days_of_month && x.months == y.months &&
           x.days_of_week == y.days_of_week;
  }
};

/// `"cron": "0 3 * * *"` with its `time_zone`: fires at the minutes the
/// expression selects, on the wall clock of the zone.
struct cron_timing {
  /// As written, surrounding blanks trimmed.
  std::string expression;
  cron_fields fields;
  /// An IANA name ("Europe/Berlin") or "UTC" (the default).
  std::string time_zone = "UTC";
};

/// A schedule's timing: an interval or a cron expression.
using schedule_timing = std::variant<interval_timing, cron_timing>;

/// Reads a duration as `"every"` takes it: one or more of `<n>d`, `<n>h`,
/// `<n>m`, `<n>s`, `<n>ms`, largest unit first, each at most once (`"30s"`,
/// `"1h30m"`, `"1500ms"` is not whole seconds and refused), from
/// `min_interval_s` to `max_interval_s`. The error leaves `where` and `path`
/// empty for the caller to fill in.
expected<interval_timing> parse_interval(std::string_view text);

/// Reads a five-field cron expression: minute (0-59), hour (0-23),
/// day-of-month (1-31), month (1-12 or JAN-DEC), day-of-week (0-7 or
/// SUN-SAT, 0 and 7 both Sunday), separated by blanks. Each field is a
/// comma-separated list of `*`, `n`, `a-b`, `*/s` or `a-b/s` (step s from 1
/// to the size of the field's range); names are case-insensitive; a range
/// never wraps around (`FRI-MON` is refused). An expression that can never
/// fire (`0 0 30 2 *`, `0 0 31 4,6 *`) is refused, so `next_after` always
/// finds a time. The error names the field and says what is wrong, with
/// `where` and `path` empty.
expected<cron_fields> parse_cron_fields(std::string_view expression);

/// `parse_cron_fields` in `time_zone`: "UTC" or an IANA name the system's tz
/// database has (an unknown one is refused).
expected<cron_timing> parse_cron(std::string_view expression,
                                 std::string_view time_zone = "UTC");

/// The first fire time strictly after `now_s` (seconds since the Unix epoch,
/// a whole number of seconds); nullopt when `now_s` is not a time from 1970
/// to 9999 or the zone can no longer be read. A cron time is looked for on
/// the zone's wall clock; where its clocks change:
///
/// - a wall time the change skips (spring forward) fires at the first
///   instant after the gap: `30 2 * * *` fires at 03:00 that day in Berlin,
///   and several fire times in one gap fire once;
/// - a wall time the change repeats (fall back) fires once, at its first
///   occurrence: `30 2 * * *` fires at 02:30 summer time, and `0 * * * *`
///   does not fire again in the repeated hour.
std::optional<double> next_after(const schedule_timing& timing, double now_s);

/// The last fire time at or before `t_s`, under the same rules; nullopt as
/// for `next_after`, or when there is none within nine years.
std::optional<double> last_at_or_before(const schedule_timing& timing,
                                        double t_s);

// -- overlap ------------------------------------------------------------------

/// What a fire time does while the schedule's previous run is still going
/// (Temporal's overlap policies).
enum class overlap_policy : std::uint8_t {
  /// Nothing: the fire time is dropped (the default).
  skip,
  /// Its run starts when the running one ends; at most one waits, later
  /// fire times are dropped while one does.
  buffer_one,
  /// Its run starts at once, beside the running one.
  allow_all,
  /// The running one is cancelled; this one starts when it has ended.
  cancel_other,
};

/// "skip", "buffer_one", "allow_all" or "cancel_other".
std::string_view to_string(overlap_policy x) noexcept;

/// The names of `to_string`; nullopt for anything else.
std::optional<overlap_policy>
parse_overlap_policy(std::string_view str) noexcept;

/// What to do with one fire time.
enum class fire_decision : std::uint8_t {
  /// Start a run now.
  start,
  /// Drop the fire time.
  skip,
  /// Keep it; start its run when the running one ends.
  buffer,
  /// Cancel the running run; start this one when it has ended (the caller
  /// keeps it as it keeps a buffered one).
  cancel_then_start,
};

/// "start", "skip", "buffer" or "cancel_then_start".
std::string_view to_string(fire_decision x) noexcept;

/// What a fire time does under `policy`, given whether a run is still going
/// and whether a fire time is already waiting for it to end (buffered, or
/// waiting for a cancelled run to end):
///
/// | running | waiting | skip | buffer_one | allow_all | cancel_other      |
/// |---------|---------|------|------------|-----------|-------------------|
/// | no      | any     | start| start      | start     | start             |
/// | yes     | no      | skip | buffer     | start     | cancel_then_start |
/// | yes     | yes     | skip | skip       | start     | skip              |
///
/// A waiting fire time starts when the run ends (the caller's part).
fire_decision on_fire(overlap_policy policy, bool running,
                      bool waiting) noexcept;

// -- catch-up -----------------------------------------------------------------

/// The default `catchup`: after an outage, run the most recent missed fire
/// time.
inline constexpr int default_catchup = 1;

/// The largest `catchup`.
inline constexpr int max_catchup = 100;

/// The fire times missed while nothing ran them (the node was down).
struct catchup_plan {
  /// The ones to run now, oldest first: the most recent `catchup` of those
  /// after the last run and at or before `now_s`. Each goes through
  /// `on_fire` in turn, as any fire time does.
  std::vector<double> run_s;
  /// Whether older missed fire times were left out.
  bool dropped = false;
};

/// Which missed fire times to run at `now_s`, the last one that ran being
/// `last_fired_s`: at most `catchup` (clamped to 0..`max_catchup`), the most
/// recent. Nothing when `now_s` is not after `last_fired_s`. The next fire
/// time after them is `next_after(timing, now_s)`.
catchup_plan plan_catchup(const schedule_timing& timing, double last_fired_s,
                          double now_s, int catchup = default_catchup);

// -- schedule files -----------------------------------------------------------

/// A schedule as a schedule file writes it.
struct schedule_spec {
  schedule_timing timing;
  overlap_policy overlap = overlap_policy::skip;
  int catchup = default_catchup;
  /// The `task` object as written, for the caller to read with `parse_task`
  /// (its errors' pointers then go under `/task`).
  boost::json::object task;
};

/// Parses a schedule: `{"every": "30s" | "cron": "0 3 * * *", "time_zone":
/// "Europe/Berlin", "overlap": "skip", "catchup": 1, "task": {...}}`, with
/// exactly one of `every` and `cron`, `time_zone` only with `cron`, `task`
/// an object (not read here); unknown keys are errors. Errors name `where`
/// (the file) and the JSON pointer (`/cron`).
expected<schedule_spec> parse_schedule(const boost::json::value& doc,
                                       std::string_view where);

/// Reads a schedule file and parses it (`parse_schedule`); errors name the
/// file.
expected<schedule_spec> load_schedule_file(const std::string& path);

/// The longest schedule name: a run's task id is the name, a dash and the
/// 16 characters of its due time in UTC (`nightly-20261129T030000Z`), at
/// most 64 characters.
inline constexpr std::size_t max_schedule_name = 47;

/// Whether `name` can name a schedule: 1 to `max_schedule_name` of
/// [A-Za-z0-9_.-], not "." or "..".
bool valid_schedule_name(std::string_view name) noexcept;

/// The task id of schedule `name`'s run due at `due_s` (seconds since the
/// Unix epoch): "<name>-YYYYMMDDTHHMMSSZ". A fire repeated after a restart
/// makes the same id, which the node refuses as a duplicate.
std::string schedule_run_id(std::string_view name, double due_s);

} // namespace tasksup

// Schedules (libsupervisor/core/src/schedule.cpp): intervals, cron fields,
// fire times in UTC and across the clock changes of real zones, the overlap
// table, catch-up after an outage, and schedule files. Expected times are
// written out as calendar dates and converted with libc's timegm, not with
// the code under test. 2024-01-01 is a Monday; 2024 is a leap year.
//
// Clock changes used (UTC): Europe/Berlin 2024-03-31 01:00 (02:00 CET ->
// 03:00 CEST) and 2024-10-27 01:00 (03:00 CEST -> 02:00 CET);
// America/New_York 2024-03-10 07:00 (02:00 EST -> 03:00 EDT) and
// 2024-11-03 06:00 (02:00 EDT -> 01:00 EST).

#include "tasksup/supervisor/schedule.hpp"

#include "tasksup/supervisor/config.hpp"

#include "../temp_dir.hpp"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

/// Seconds since the epoch of a UTC calendar time (libc's timegm).
double utc(int y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<double>(::timegm(&tm));
}

constexpr double minute = 60;
constexpr double hour = 3600;

/// The values a field's bit set selects, ascending.
std::vector<unsigned> values(std::uint64_t set) {
  std::vector<unsigned> out;
  for (unsigned i = 0; i < 64; ++i)
    if ((set >> i & 1) != 0)
      out.push_back(i);
  return out;
}

cron_fields fields(std::string_view expression) {
  auto f = parse_cron_fields(expression);
  INFO(expression << ": " << (f ? std::string{} : f.error().what));
  REQUIRE(f);
  return *f;
}

/// Why `expression` is refused.
std::string cron_refusal(std::string_view expression) {
  auto f = parse_cron_fields(expression);
  INFO(expression);
  REQUIRE_FALSE(f);
  CHECK(f.error().where.empty());
  CHECK(f.error().path.empty());
  return f.error().what;
}

std::string interval_refusal(std::string_view text) {
  auto t = parse_interval(text);
  INFO(text);
  REQUIRE_FALSE(t);
  return t.error().what;
}

schedule_timing every(std::string_view text) {
  auto t = parse_interval(text);
  REQUIRE(t);
  return *t;
}

schedule_timing cron(std::string_view expression,
                     std::string_view zone = "UTC") {
  auto c = parse_cron(expression, zone);
  INFO(expression << ": " << (c ? std::string{} : c.error().what));
  REQUIRE(c);
  return *c;
}

/// The `n` fire times after `from`.
std::vector<double> fires(const schedule_timing& t, double from,
                          std::size_t n) {
  std::vector<double> out;
  for (auto now = from; out.size() < n;) {
    auto next = next_after(t, now);
    REQUIRE(next);
    out.push_back(*next);
    now = *next;
  }
  return out;
}

void require_zones() {
  INFO("the zone tests read /usr/share/zoneinfo: install tzdata "
       "(scripts/bootstrap.sh does)");
  REQUIRE(std::filesystem::exists("/usr/share/zoneinfo/Europe/Berlin"));
  REQUIRE(std::filesystem::exists("/usr/share/zoneinfo/America/New_York"));
}

expected<schedule_spec> schedule(const std::string& text) {
  auto doc = parse_json_text(text, "nightly.json");
  REQUIRE(doc);
  return parse_schedule(*doc, "nightly.json");
}

/// The whole message of a schedule that must not parse.
std::string schedule_refusal(const std::string& text) {
  auto s = schedule(text);
  INFO(text);
  REQUIRE_FALSE(s);
  CHECK(s.error().where == "nightly.json");
  return s.error().to_string();
}

} // namespace

// -- intervals ----------------------------------------------------------------

TEST_CASE("schedule interval: units, combinations and bounds", "[schedule]") {
  auto secs = [](std::string_view text) {
    auto t = parse_interval(text);
    INFO(text);
    REQUIRE(t);
    return t->every_s;
  };
  CHECK(secs("30s") == 30);
  CHECK(secs("5m") == 300);
  CHECK(secs("2h") == 7200);
  CHECK(secs("1h30m") == 5400);
  CHECK(secs("1d") == 86400);
  CHECK(secs("1d2h3m4s") == 86400 + 7200 + 180 + 4);
  CHECK(secs("2000ms") == 2);
  CHECK(secs("1s") == 1);
  CHECK(secs("366d") == 366 * 86400);
  CHECK(secs("90m") == 5400);
  CHECK(secs("0h45m") == 2700);
}

TEST_CASE("schedule interval: refusals say why", "[schedule]") {
  CHECK(interval_refusal("250ms") ==
        "\"250ms\" is shorter than the shortest interval, 1s");
  CHECK(interval_refusal("0s") ==
        "\"0s\" is shorter than the shortest interval, 1s");
  CHECK(interval_refusal("367d") ==
        "\"367d\" is longer than the longest interval, 366d");
  CHECK(interval_refusal("1500ms") ==
        "\"1500ms\" is not a whole number of seconds");
  CHECK(interval_refusal("30m1h") ==
        "units go from the largest to the smallest, each at most once "
        "(\"1h30m\"), got \"30m1h\"");
  CHECK_THAT(interval_refusal("1h1h"), Catch::Contains("each at most once"));
  for (auto text : {"", "30", "s", "m5", "1 h", "-5s", "5S", "1w", "1.5h",
                    "1h30", "9999999999s"})
    CHECK(interval_refusal(text) ==
          "expected a duration such as \"30s\", \"5m\", \"2h\", \"1h30m\" or "
          "\"1d\", got \"" +
            std::string{text} + "\"");
}

TEST_CASE("schedule interval: fires at multiples of the interval since the "
          "epoch, strictly after now",
          "[schedule]") {
  auto t = every("30s");
  CHECK(next_after(t, utc(2024, 1, 1, 0, 0, 10)) == utc(2024, 1, 1, 0, 0, 30));
  CHECK(next_after(t, utc(2024, 1, 1, 0, 0, 30)) == utc(2024, 1, 1, 0, 1, 0));
  CHECK(next_after(t, utc(2024, 1, 1, 0, 0, 29) + 0.5) ==
        utc(2024, 1, 1, 0, 0, 30));
  CHECK(last_at_or_before(t, utc(2024, 1, 1, 0, 0, 30)) ==
        utc(2024, 1, 1, 0, 0, 30));
  CHECK(last_at_or_before(t, utc(2024, 1, 1, 0, 0, 59)) ==
        utc(2024, 1, 1, 0, 0, 30));
  CHECK(next_after(every("1h"), utc(2024, 1, 1, 10, 59, 59)) ==
        utc(2024, 1, 1, 11));
  // 90 minutes: 16 per day, so every midnight UTC is one.
  CHECK(fires(every("90m"), utc(2024, 1, 1), 3) ==
        std::vector<double>{utc(2024, 1, 1, 1, 30), utc(2024, 1, 1, 3),
                            utc(2024, 1, 1, 4, 30)});
  CHECK(next_after(every("1d"), utc(2024, 2, 28, 12)) == utc(2024, 2, 29));
}

TEST_CASE("schedule: a time that is not one gives no fire time", "[schedule]") {
  auto nan = std::numeric_limits<double>::quiet_NaN();
  auto inf = std::numeric_limits<double>::infinity();
  for (const auto& t : {every("1h"), cron("0 3 * * *")}) {
    CHECK_FALSE(next_after(t, nan));
    CHECK_FALSE(next_after(t, inf));
    CHECK_FALSE(next_after(t, -1));
    CHECK_FALSE(next_after(t, 1e12)); // after 9999
    CHECK_FALSE(last_at_or_before(t, nan));
    CHECK(next_after(t, 0));
  }
}

// -- cron fields
// ---------------------------------------------------------------

TEST_CASE("schedule cron: every form of a field", "[schedule]") {
  auto all = [](unsigned lo, unsigned hi) {
    std::vector<unsigned> out;
    for (auto i = lo; i <= hi; ++i)
      out.push_back(i);
    return out;
  };
  auto f = fields("* * * * *");
  CHECK(values(f.minutes) == all(0, 59));
  CHECK(values(f.hours) == all(0, 23));
  CHECK(values(f.days_of_month) == all(1, 31));
  CHECK(values(f.months) == all(1, 12));
  CHECK(values(f.days_of_week) == all(0, 6));
  CHECK_FALSE(f.days_of_month_restricted());
  CHECK_FALSE(f.days_of_week_restricted());

  CHECK(values(fields("5 * * * *").minutes) == std::vector<unsigned>{5});
  CHECK(values(fields("1-3 * * * *").minutes) ==
        std::vector<unsigned>{1, 2, 3});
  CHECK(values(fields("1,3,5 * * * *").minutes) ==
        std::vector<unsigned>{1, 3, 5});
  CHECK(values(fields("*/15 * * * *").minutes) ==
        std::vector<unsigned>{0, 15, 30, 45});
  CHECK(values(fields("10-30/10 * * * *").minutes) ==
        std::vector<unsigned>{10, 20, 30});
  CHECK(values(fields("1,10-12,*/30 * * * *").minutes) ==
        std::vector<unsigned>{0, 1, 10, 11, 12, 30});
  CHECK(values(fields("0-59/60 * * * *").minutes) == std::vector<unsigned>{0});
  CHECK(values(fields("05 * * * *").minutes) == std::vector<unsigned>{5});
  CHECK(values(fields("0 */6 * * *").hours) ==
        std::vector<unsigned>{0, 6, 12, 18});
  CHECK(values(fields("0 0 */10 * *").days_of_month) ==
        std::vector<unsigned>{1, 11, 21, 31});
  CHECK(values(fields("0 0 * */5 *").months) ==
        std::vector<unsigned>{1, 6, 11});
  CHECK(values(fields("0 0 * * */2").days_of_week) ==
        std::vector<unsigned>{0, 2, 4, 6});
  // Blanks: any run of spaces and tabs between fields, none needed around.
  CHECK(fields("  0\t3  * *   * ") == fields("0 3 * * *"));
}

TEST_CASE("schedule cron: month and weekday names, and Sunday as 0 or 7",
          "[schedule]") {
  auto f = fields("0 0 * JAN,mar-May sun");
  CHECK(values(f.months) == std::vector<unsigned>{1, 3, 4, 5});
  CHECK(values(f.days_of_week) == std::vector<unsigned>{0});
  CHECK(values(fields("0 0 * dec *").months) == std::vector<unsigned>{12});
  CHECK(values(fields("0 0 * * MON-FRI").days_of_week) ==
        std::vector<unsigned>{1, 2, 3, 4, 5});
  CHECK(values(fields("0 0 * * Sat,Sun").days_of_week) ==
        std::vector<unsigned>{0, 6});
  CHECK(values(fields("0 0 * * 7").days_of_week) == std::vector<unsigned>{0});
  CHECK(values(fields("0 0 * * 5-7").days_of_week) ==
        std::vector<unsigned>{0, 5, 6});
  CHECK(values(fields("0 0 * * FRI-7").days_of_week) ==
        std::vector<unsigned>{0, 5, 6});
  CHECK(values(fields("0 0 * * 1-7/2").days_of_week) ==
        std::vector<unsigned>{0, 1, 3, 5});
  // 0-7 is every day: not a restriction.
  CHECK_FALSE(fields("0 0 * * 0-7").days_of_week_restricted());
  CHECK(values(fields("0 0 * 1-12/3 *").months) ==
        std::vector<unsigned>{1, 4, 7, 10});
}

TEST_CASE("schedule cron: refusals name the field and say why", "[schedule]") {
  CHECK(cron_refusal("0 3 * *") ==
        "expected 5 fields (minute hour day-of-month month day-of-week), "
        "got 4");
  CHECK(cron_refusal("0 0 3 * * *") ==
        "expected 5 fields (minute hour day-of-month month day-of-week), "
        "got 6");
  CHECK(cron_refusal("") ==
        "expected 5 fields (minute hour day-of-month month day-of-week), "
        "got 0");
  CHECK(cron_refusal("61 * * * *") ==
        "minute field \"61\": 61 is outside 0-59");
  CHECK(cron_refusal("* 24 * * *") == "hour field \"24\": 24 is outside 0-23");
  CHECK(cron_refusal("* * 0 * *") ==
        "day-of-month field \"0\": 0 is outside 1-31");
  CHECK(cron_refusal("* * 32 * *") ==
        "day-of-month field \"32\": 32 is outside 1-31");
  CHECK(cron_refusal("* * * 13 *") == "month field \"13\": 13 is outside 1-12");
  CHECK(cron_refusal("* * * 0 *") == "month field \"0\": 0 is outside 1-12");
  CHECK(cron_refusal("* * * * 8") ==
        "day-of-week field \"8\": 8 is outside 0-7");
  CHECK(cron_refusal("* * * JANUARY *") ==
        "month field \"JANUARY\": unknown name \"JANUARY\" (expected jan-dec, "
        "in any case)");
  CHECK(cron_refusal("* * * * FRI-MON") ==
        "day-of-week field \"FRI-MON\": the range \"FRI-MON\" runs backwards "
        "(ranges do not wrap around)");
  CHECK(cron_refusal("50-10 * * * *") ==
        "minute field \"50-10\": the range \"50-10\" runs backwards (ranges "
        "do not wrap around)");
  CHECK(cron_refusal("*/0 * * * *") ==
        "minute field \"*/0\": the step \"0\" is not a number from 1 to 60");
  CHECK(cron_refusal("* */25 * * *") ==
        "hour field \"*/25\": the step \"25\" is not a number from 1 to 24");
  CHECK(cron_refusal("5/10 * * * *") ==
        "minute field \"5/10\": a step needs a range: write 5-59/... or */...");
  CHECK(cron_refusal("1,,2 * * * *") ==
        "minute field \"1,,2\": an empty list item (two commas, or one at an "
        "end)");
  CHECK(cron_refusal("1, * * * *") ==
        "minute field \"1,\": an empty list item (two commas, or one at an "
        "end)");
  CHECK(cron_refusal("JAN * * * *") ==
        "minute field \"JAN\": expected a number, got \"JAN\"");
  CHECK(cron_refusal("5x * * * *") ==
        "minute field \"5x\": expected a number or a range, got \"5x\"");
  CHECK(cron_refusal("? * * * *") ==
        "minute field \"?\": expected a number or a range, got \"?\"");
  CHECK(cron_refusal("5- * * * *") ==
        "minute field \"5-\": a range needs a value on both sides of '-'");
  CHECK(cron_refusal("@daily") ==
        "macros such as \"@daily\" are not supported: write the five fields "
        "(@daily is \"0 0 * * *\")");
  CHECK_THAT(cron_refusal(std::string(300, '*')),
             Catch::Contains("more than 256 bytes"));
}

TEST_CASE("schedule cron: an expression that can never fire is refused",
          "[schedule]") {
  CHECK(cron_refusal("0 0 30 2 *") ==
        "day-of-month field \"30\" names no day that month field \"2\" has: "
        "the expression never fires");
  CHECK(cron_refusal("0 0 31 4,6,9,11 *") ==
        "day-of-month field \"31\" names no day that month field "
        "\"4,6,9,11\" has: the expression never fires");
  CHECK_THAT(cron_refusal("0 0 30-31 FEB *"),
             Catch::Contains("the expression never fires"));
  // Leap days, the 31st of some month, or a weekday (cron's OR rule) can.
  CHECK(parse_cron_fields("0 0 29 2 *"));
  CHECK(parse_cron_fields("0 0 31 4,5 *"));
  CHECK(parse_cron_fields("0 0 30 2 MON"));
}

TEST_CASE("schedule cron: time zones must be known", "[schedule]") {
  require_zones();
  CHECK(parse_cron("0 3 * * *")->time_zone == "UTC");
  CHECK(parse_cron("0 3 * * *", "Europe/Berlin")->time_zone == "Europe/Berlin");
  CHECK(parse_cron(" 0 3 * * * ", "Etc/UTC")->expression == "0 3 * * *");
  for (auto zone : {"Mars/Olympus", "", "../../etc/passwd", "/etc/passwd",
                    "europe/berlin"}) {
    auto c = parse_cron("0 3 * * *", zone);
    INFO(zone);
    REQUIRE_FALSE(c);
    CHECK_THAT(c.error().what, Catch::StartsWith("unknown time zone"));
  }
  CHECK(parse_cron("0 3 * * *", "Mars/Olympus").error().what ==
        "unknown time zone \"Mars/Olympus\" (expected \"UTC\" or an IANA name "
        "such as \"Europe/Berlin\")");
  // The expression's error comes first.
  CHECK(parse_cron("61 * * * *", "Mars/Olympus").error().what ==
        "minute field \"61\": 61 is outside 0-59");
}

// -- cron fire times in UTC
// ----------------------------------------------------

TEST_CASE("schedule cron: next fire time in UTC, strictly after now",
          "[schedule]") {
  auto daily = cron("0 3 * * *");
  CHECK(next_after(daily, utc(2024, 1, 1, 12)) == utc(2024, 1, 2, 3));
  CHECK(next_after(daily, utc(2024, 1, 2, 3)) == utc(2024, 1, 3, 3));
  CHECK(next_after(daily, utc(2024, 1, 2, 2, 59, 59) + 0.5) ==
        utc(2024, 1, 2, 3));
  CHECK(next_after(daily, utc(2024, 12, 31, 4)) == utc(2025, 1, 1, 3));
  CHECK(next_after(cron("*/15 * * * *"), utc(2024, 1, 1, 10, 7)) ==
        utc(2024, 1, 1, 10, 15));
  CHECK(next_after(cron("*/15 * * * *"), utc(2024, 1, 1, 10, 45)) ==
        utc(2024, 1, 1, 11));
  CHECK(next_after(cron("* * * * *"), utc(2024, 1, 1, 10, 7, 1)) ==
        utc(2024, 1, 1, 10, 8));
  // Friday 2024-01-05 after 09:30: next on Monday.
  CHECK(next_after(cron("30 9 * * MON-FRI"), utc(2024, 1, 5, 10)) ==
        utc(2024, 1, 8, 9, 30));
  CHECK(next_after(cron("0 0 1 * *"), utc(2024, 1, 15)) == utc(2024, 2, 1));
  CHECK(next_after(cron("0 0 1 JUN *"), utc(2024, 7, 1)) == utc(2025, 6, 1));
  CHECK(next_after(cron("0 0 * * 7"), utc(2024, 1, 1)) == utc(2024, 1, 7));
  CHECK(next_after(cron("59 23 31 12 *"), utc(2024, 1, 1)) ==
        utc(2024, 12, 31, 23, 59));
}

TEST_CASE("schedule cron: month ends and leap years", "[schedule]") {
  // The 31st: February and April have none.
  CHECK(
    fires(cron("0 0 31 * *"), utc(2024, 1, 31), 3) ==
    std::vector<double>{utc(2024, 3, 31), utc(2024, 5, 31), utc(2024, 7, 31)});
  // 29 February: leap years only, and 2100 is not one.
  auto leap = cron("0 0 29 2 *");
  CHECK(next_after(leap, utc(2023, 1, 1)) == utc(2024, 2, 29));
  CHECK(next_after(leap, utc(2024, 3, 1)) == utc(2028, 2, 29));
  CHECK(next_after(leap, utc(2096, 3, 1)) == utc(2104, 2, 29));
  CHECK(last_at_or_before(leap, utc(2104, 2, 28)) == utc(2096, 2, 29));
  // The 28th to 31st of February: the 28th, and the 29th in leap years.
  CHECK(
    fires(cron("0 0 28-31 2 *"), utc(2023, 2, 27), 3) ==
    std::vector<double>{utc(2023, 2, 28), utc(2024, 2, 28), utc(2024, 2, 29)});
  CHECK(next_after(cron("0 12 30 * *"), utc(2024, 1, 30, 13)) ==
        utc(2024, 3, 30, 12));
}

TEST_CASE("schedule cron: day-of-month and day-of-week, either when both "
          "are restricted",
          "[schedule]") {
  // Friday the 5th, 12th and 19th, and Saturday the 13th.
  CHECK(fires(cron("0 0 13 * FRI"), utc(2024, 1, 1), 4) ==
        std::vector<double>{utc(2024, 1, 5), utc(2024, 1, 12), utc(2024, 1, 13),
                            utc(2024, 1, 19)});
  // One of them `*`: only the other counts.
  CHECK(fires(cron("0 0 * * FRI"), utc(2024, 1, 1), 2) ==
        std::vector<double>{utc(2024, 1, 5), utc(2024, 1, 12)});
  CHECK(fires(cron("0 0 13 * *"), utc(2024, 1, 1), 2) ==
        std::vector<double>{utc(2024, 1, 13), utc(2024, 2, 13)});
  // A field counts as restricted by what it selects, not how it is written:
  // 1-31 is every day, so only Fridays fire.
  CHECK(fires(cron("0 0 1-31 * FRI"), utc(2024, 1, 1), 2) ==
        std::vector<double>{utc(2024, 1, 5), utc(2024, 1, 12)});
  // */2 is the odd days, a restriction: odd days or Mondays. Monday
  // 2024-01-01 00:00 itself is not after now.
  CHECK(fires(cron("0 0 */2 * MON"), utc(2024, 1, 1), 5) ==
        std::vector<double>{utc(2024, 1, 3), utc(2024, 1, 5), utc(2024, 1, 7),
                            utc(2024, 1, 8), utc(2024, 1, 9)});
  // The month restricts both: Mondays or the 30th, in February only.
  CHECK(fires(cron("0 0 30 2 MON"), utc(2024, 2, 20), 2) ==
        std::vector<double>{utc(2024, 2, 26), utc(2025, 2, 3)});
  auto f = fields("0 0 13 * FRI");
  CHECK(f.matches_day(1, 13, 6));
  CHECK(f.matches_day(1, 5, 5));
  CHECK_FALSE(f.matches_day(1, 6, 6));
  CHECK_FALSE(f.matches_day(13, 13, 5));
}

TEST_CASE("schedule cron: the last fire time at or before a time",
          "[schedule]") {
  auto daily = cron("0 3 * * *");
  CHECK(last_at_or_before(daily, utc(2024, 1, 2, 3)) == utc(2024, 1, 2, 3));
  CHECK(last_at_or_before(daily, utc(2024, 1, 2, 2, 59, 59)) ==
        utc(2024, 1, 1, 3));
  CHECK(last_at_or_before(cron("30 9 * * MON-FRI"), utc(2024, 1, 8, 9)) ==
        utc(2024, 1, 5, 9, 30));
  CHECK(last_at_or_before(cron("0 0 31 * *"), utc(2024, 4, 30)) ==
        utc(2024, 3, 31));
}

// -- cron fire times across clock changes
// --------------------------------------

TEST_CASE("schedule cron in Europe/Berlin: the hour skipped in spring fires "
          "at the first instant after it",
          "[schedule]") {
  require_zones();
  // 02:30 does not exist on 2024-03-31: fires at 03:00 CEST (01:00 UTC).
  auto t = cron("30 2 * * *", "Europe/Berlin");
  CHECK(fires(t, utc(2024, 3, 29, 12), 3) ==
        std::vector<double>{utc(2024, 3, 30, 1, 30), utc(2024, 3, 31, 1),
                            utc(2024, 4, 1, 0, 30)});
  CHECK(next_after(cron("0 3 * * *", "Europe/Berlin"), utc(2024, 3, 30, 12)) ==
        utc(2024, 3, 31, 1));
  // 02:00, 02:30 and 03:00 all fall on 01:00 UTC: one fire.
  CHECK(
    fires(cron("*/30 * * * *", "Europe/Berlin"), utc(2024, 3, 31, 0, 15), 4) ==
    std::vector<double>{utc(2024, 3, 31, 0, 30), utc(2024, 3, 31, 1),
                        utc(2024, 3, 31, 1, 30), utc(2024, 3, 31, 2)});
  CHECK(fires(cron("0 * * * *", "Europe/Berlin"), utc(2024, 3, 30, 23, 30),
              3) == std::vector<double>{utc(2024, 3, 31, 0),
                                        utc(2024, 3, 31, 1),
                                        utc(2024, 3, 31, 2)});
  CHECK(last_at_or_before(t, utc(2024, 3, 31, 1, 0, 30)) ==
        utc(2024, 3, 31, 1));
  CHECK(last_at_or_before(t, utc(2024, 3, 31, 0, 59, 59)) ==
        utc(2024, 3, 30, 1, 30));
}

TEST_CASE("schedule cron in Europe/Berlin: the hour repeated in autumn fires "
          "once, at its first occurrence",
          "[schedule]") {
  require_zones();
  // 02:30 happens at 00:30 UTC (CEST) and 01:30 UTC (CET) on 2024-10-27.
  auto t = cron("30 2 * * *", "Europe/Berlin");
  CHECK(
    fires(t, utc(2024, 10, 26, 12), 2) ==
    std::vector<double>{utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)});
  // From inside the second 02:xx (02:15 CET), today's 02:30 is past.
  CHECK(next_after(t, utc(2024, 10, 27, 1, 15)) == utc(2024, 10, 28, 1, 30));
  // Hourly: 02:00 CEST, then 03:00 CET; 02:00 CET does not fire again.
  CHECK(
    fires(cron("0 * * * *", "Europe/Berlin"), utc(2024, 10, 26, 22, 30), 4) ==
    std::vector<double>{utc(2024, 10, 26, 23), utc(2024, 10, 27, 0),
                        utc(2024, 10, 27, 2), utc(2024, 10, 27, 3)});
  CHECK(next_after(cron("45 * * * *", "Europe/Berlin"),
                   utc(2024, 10, 27, 1, 15)) == utc(2024, 10, 27, 2, 45));
  CHECK(next_after(cron("0 3 * * *", "Europe/Berlin"), utc(2024, 10, 26, 12)) ==
        utc(2024, 10, 27, 2));
  CHECK(last_at_or_before(t, utc(2024, 10, 27, 1, 45)) ==
        utc(2024, 10, 27, 0, 30));
  CHECK(last_at_or_before(cron("0 * * * *", "Europe/Berlin"),
                          utc(2024, 10, 27, 1, 59)) == utc(2024, 10, 27, 0));
}

TEST_CASE("schedule cron in America/New_York across both clock changes",
          "[schedule]") {
  require_zones();
  auto t = cron("30 2 * * *", "America/New_York");
  // Spring: 02:30 EST on the 9th, none on the 10th (fires at 03:00 EDT),
  // 02:30 EDT on the 11th.
  CHECK(fires(t, utc(2024, 3, 9), 3) ==
        std::vector<double>{utc(2024, 3, 9, 7, 30), utc(2024, 3, 10, 7),
                            utc(2024, 3, 11, 6, 30)});
  // Autumn: 01:30 happens at 05:30 UTC (EDT) and 06:30 UTC (EST).
  CHECK(
    fires(cron("30 1 * * *", "America/New_York"), utc(2024, 11, 2, 12), 2) ==
    std::vector<double>{utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)});
  // Weekdays at 09:00 over the change: Friday in EDT, Monday in EST.
  CHECK(next_after(cron("0 9 * * MON-FRI", "America/New_York"),
                   utc(2024, 11, 1, 13)) == utc(2024, 11, 4, 14));
}

TEST_CASE("schedule cron: walking forward and walking back agree across "
          "clock changes",
          "[schedule]") {
  require_zones();
  struct window {
    const char* zone;
    double from;
  };
  // From half an hour before each change: 40 fire times of each
  // expression cross it.
  for (auto w : {window{"Europe/Berlin", utc(2024, 3, 31, 0, 30)},
                 window{"Europe/Berlin", utc(2024, 10, 27, 0, 30)},
                 window{"America/New_York", utc(2024, 3, 10, 6, 30)},
                 window{"America/New_York", utc(2024, 11, 3, 5, 30)}}) {
    for (auto expr : {"*/20 * * * *", "0 * * * *", "30 2 * * *", "5 1-3 * * *",
                      "* * * * *"}) {
      auto t = cron(expr, w.zone);
      auto times = fires(t, w.from, 40);
      INFO(w.zone << " " << expr);
      for (std::size_t i = 1; i < times.size(); ++i) {
        CHECK(times[i] > times[i - 1]);
        CHECK(last_at_or_before(t, times[i]) == times[i]);
        CHECK(last_at_or_before(t, times[i] - 1) == times[i - 1]);
      }
    }
  }
}

// -- overlap
// --------------------------------------------------------------------

TEST_CASE("schedule overlap: names round-trip, skip is the default",
          "[schedule]") {
  for (auto x : {overlap_policy::skip, overlap_policy::buffer_one,
                 overlap_policy::allow_all, overlap_policy::cancel_other})
    CHECK(parse_overlap_policy(to_string(x)) == x);
  CHECK(to_string(overlap_policy::buffer_one) == "buffer_one");
  CHECK(to_string(overlap_policy::cancel_other) == "cancel_other");
  CHECK_FALSE(parse_overlap_policy("Skip"));
  CHECK_FALSE(parse_overlap_policy("buffer-one"));
  CHECK_FALSE(parse_overlap_policy("buffer_all"));
  CHECK_FALSE(parse_overlap_policy(""));
  CHECK(schedule_spec{}.overlap == overlap_policy::skip);
  CHECK(to_string(fire_decision::cancel_then_start) == "cancel_then_start");
}

TEST_CASE("schedule overlap: what a fire time does, policy by policy",
          "[schedule]") {
  using p = overlap_policy;
  using d = fire_decision;
  struct row {
    p policy;
    bool running;
    bool waiting;
    d expected;
  };
  // Nothing running: every policy starts.
  // Running, none waiting: skip drops, buffer_one keeps it, allow_all starts
  // beside it, cancel_other cancels it and keeps this one.
  // Running, one waiting: only allow_all starts; the others drop it.
  for (auto r : {row{p::skip, false, false, d::start},
                 row{p::buffer_one, false, false, d::start},
                 row{p::allow_all, false, false, d::start},
                 row{p::cancel_other, false, false, d::start},
                 row{p::buffer_one, false, true, d::start},
                 row{p::skip, true, false, d::skip},
                 row{p::buffer_one, true, false, d::buffer},
                 row{p::allow_all, true, false, d::start},
                 row{p::cancel_other, true, false, d::cancel_then_start},
                 row{p::skip, true, true, d::skip},
                 row{p::buffer_one, true, true, d::skip},
                 row{p::allow_all, true, true, d::start},
                 row{p::cancel_other, true, true, d::skip}}) {
    INFO(to_string(r.policy)
         << " running=" << r.running << " waiting=" << r.waiting);
    CHECK(on_fire(r.policy, r.running, r.waiting) == r.expected);
  }
}

// -- catch-up
// -------------------------------------------------------------------

TEST_CASE("schedule catch-up: the most recent missed fire times, at most "
          "catchup of them",
          "[schedule]") {
  auto hourly = every("1h");
  auto last = utc(2024, 1, 1, 10);
  auto now = utc(2024, 1, 1, 15, 30);
  // Missed: 11:00, 12:00, 13:00, 14:00, 15:00.
  auto one = plan_catchup(hourly, last, now);
  CHECK(one.run_s == std::vector<double>{utc(2024, 1, 1, 15)});
  CHECK(one.dropped);
  auto three = plan_catchup(hourly, last, now, 3);
  CHECK(three.run_s == std::vector<double>{utc(2024, 1, 1, 13),
                                           utc(2024, 1, 1, 14),
                                           utc(2024, 1, 1, 15)});
  CHECK(three.dropped);
  auto five = plan_catchup(hourly, last, now, 5);
  CHECK(five.run_s.size() == 5);
  CHECK(five.run_s.front() == utc(2024, 1, 1, 11));
  CHECK_FALSE(five.dropped);
  CHECK(plan_catchup(hourly, last, now, 10).run_s == five.run_s);
  auto none = plan_catchup(hourly, last, now, 0);
  CHECK(none.run_s.empty());
  CHECK(none.dropped);
  // Nothing missed; a fire time at now counts; now before the last run.
  auto early = plan_catchup(hourly, last, utc(2024, 1, 1, 10, 30), 3);
  CHECK(early.run_s.empty());
  CHECK_FALSE(early.dropped);
  CHECK(plan_catchup(hourly, last, utc(2024, 1, 1, 11), 3).run_s ==
        std::vector<double>{utc(2024, 1, 1, 11)});
  CHECK(plan_catchup(hourly, last, last, 3).run_s.empty());
  CHECK(plan_catchup(hourly, last, last - hour, 3).run_s.empty());
  // catchup is clamped to 0..max_catchup.
  CHECK(plan_catchup(hourly, last, now, -3).run_s.empty());
  auto many = plan_catchup(every("1s"), 0, 1000, 1000);
  CHECK(many.run_s.size() == static_cast<std::size_t>(max_catchup));
  CHECK(many.run_s.back() == 1000);
  CHECK(many.run_s.front() == 901);
  CHECK(many.dropped);
}

TEST_CASE("schedule catch-up: cron fire times, across clock changes",
          "[schedule]") {
  require_zones();
  // Missed: the 2nd, 3rd, 4th and 5th at 03:00.
  auto daily =
    plan_catchup(cron("0 3 * * *"), utc(2024, 1, 1, 3), utc(2024, 1, 5, 12), 2);
  CHECK(daily.run_s ==
        std::vector<double>{utc(2024, 1, 4, 3), utc(2024, 1, 5, 3)});
  CHECK(daily.dropped);
  // Berlin, autumn: 02:00 CEST and 03:00 CET, not 02:00 CET.
  auto autumn =
    plan_catchup(cron("0 * * * *", "Europe/Berlin"), utc(2024, 10, 26, 23),
                 utc(2024, 10, 27, 2, 30), 5);
  CHECK(autumn.run_s ==
        std::vector<double>{utc(2024, 10, 27, 0), utc(2024, 10, 27, 2)});
  CHECK_FALSE(autumn.dropped);
  // Berlin, spring: the gap's fire times once, at 01:00 UTC.
  auto spring =
    plan_catchup(cron("*/30 * * * *", "Europe/Berlin"), utc(2024, 3, 31, 0, 30),
                 utc(2024, 3, 31, 1, 45), 5);
  CHECK(spring.run_s ==
        std::vector<double>{utc(2024, 3, 31, 1), utc(2024, 3, 31, 1, 30)});
  CHECK_FALSE(spring.dropped);
}

// -- schedule files
// -------------------------------------------------------------

TEST_CASE("schedule file: every key", "[schedule]") {
  require_zones();
  auto s = schedule(R"({"cron": "0 3 * * MON-FRI", "time_zone": "Europe/Berlin",
    "overlap": "buffer_one", "catchup": 3,
    "task": {"id": "nightly", "prompt": "tidy up", "future_key": [1, 2]}})");
  REQUIRE(s);
  const auto* c = std::get_if<cron_timing>(&s->timing);
  REQUIRE(c != nullptr);
  CHECK(c->expression == "0 3 * * MON-FRI");
  CHECK(c->time_zone == "Europe/Berlin");
  CHECK(values(c->fields.days_of_week) == std::vector<unsigned>{1, 2, 3, 4, 5});
  CHECK(s->overlap == overlap_policy::buffer_one);
  CHECK(s->catchup == 3);
  // The task is kept as written, not read.
  CHECK(s->task == boost::json::parse(R"({"id": "nightly", "prompt": "tidy up",
    "future_key": [1, 2]})")
                     .as_object());
}

TEST_CASE("schedule file: defaults", "[schedule]") {
  auto s = schedule(R"({"every": "30s", "task": {"prompt": "p"}})");
  REQUIRE(s);
  REQUIRE(std::holds_alternative<interval_timing>(s->timing));
  CHECK(std::get<interval_timing>(s->timing).every_s == 30);
  CHECK(s->overlap == overlap_policy::skip);
  CHECK(s->catchup == 1);
  auto c = schedule(R"({"cron": "0 3 * * *", "task": {}})");
  REQUIRE(c);
  CHECK(std::get<cron_timing>(c->timing).time_zone == "UTC");
  CHECK(schedule(R"({"every": "1h", "catchup": 0, "task": {}})")->catchup == 0);
  CHECK(schedule(R"({"every": "1h", "catchup": 100, "task": {}})")->catchup ==
        100);
}

TEST_CASE("schedule file: refusals name the file and the JSON pointer",
          "[schedule]") {
  CHECK(schedule_refusal(R"({"every": "30s", "cron": "* * * * *",
                             "task": {}})") ==
        "nightly.json: /cron: \"cron\" and \"every\" exclude each other: give "
        "one");
  CHECK(schedule_refusal(R"({"task": {}})") ==
        "nightly.json: missing \"every\" or \"cron\" (one of them)");
  CHECK(schedule_refusal(R"({"every": "30s", "time_zone": "UTC",
                             "task": {}})") ==
        "nightly.json: /time_zone: only a \"cron\" schedule has a time zone "
        "(\"every\" counts from the Unix epoch)");
  CHECK(schedule_refusal(R"({"every": "250ms", "task": {}})") ==
        "nightly.json: /every: \"250ms\" is shorter than the shortest "
        "interval, 1s");
  CHECK(schedule_refusal(R"({"every": 30, "task": {}})") ==
        "nightly.json: /every: expected a string");
  CHECK(schedule_refusal(R"({"cron": "61 * * * *", "task": {}})") ==
        "nightly.json: /cron: minute field \"61\": 61 is outside 0-59");
  CHECK(schedule_refusal(R"({"cron": "0 0 30 2 *", "task": {}})") ==
        "nightly.json: /cron: day-of-month field \"30\" names no day that "
        "month field \"2\" has: the expression never fires");
  CHECK(schedule_refusal(R"({"cron": "0 3 * * *", "time_zone": "Mars/Olympus",
                             "task": {}})") ==
        "nightly.json: /time_zone: unknown time zone \"Mars/Olympus\" "
        "(expected \"UTC\" or an IANA name such as \"Europe/Berlin\")");
  CHECK(schedule_refusal(R"({"cron": "0 3 * * *", "time_zone": "",
                             "task": {}})") ==
        "nightly.json: /time_zone: expected a non-empty string");
  CHECK(schedule_refusal(R"({"every": "1h", "overlap": "sometimes",
                             "task": {}})") ==
        "nightly.json: /overlap: expected one of \"skip\", \"buffer_one\", "
        "\"allow_all\", \"cancel_other\", got \"sometimes\"");
  CHECK(schedule_refusal(R"({"every": "1h", "catchup": 101, "task": {}})") ==
        "nightly.json: /catchup: expected an integer from 0 to 100");
  CHECK(schedule_refusal(R"({"every": "1h", "catchup": -1, "task": {}})") ==
        "nightly.json: /catchup: expected an integer from 0 to 100");
  CHECK(schedule_refusal(R"({"every": "1h", "catchup": 1.5, "task": {}})") ==
        "nightly.json: /catchup: expected an integer from 0 to 100");
  CHECK(schedule_refusal(R"({"every": "1h", "when": "now", "task": {}})") ==
        "nightly.json: /when: unknown key \"when\" (allowed: every, cron, "
        "time_zone, overlap, catchup, task)");
  CHECK(schedule_refusal(R"({"every": "1h"})") ==
        "nightly.json: missing required key \"task\"");
  CHECK(schedule_refusal(R"({"every": "1h", "task": "run it"})") ==
        "nightly.json: /task: expected an object");
  CHECK(schedule_refusal(R"(["every", "1h"])") ==
        "nightly.json: expected an object");
}

TEST_CASE("schedule file: read from disk, errors name the file", "[schedule]") {
  test::temp_dir dir{"schedule"};
  auto path = dir.path + "/hourly.json";
  std::ofstream{path} << R"({"every": "1h", "task": {"prompt": "p"}})";
  auto s = load_schedule_file(path);
  REQUIRE(s);
  CHECK(std::get<interval_timing>(s->timing).every_s == 3600);

  auto bad = dir.path + "/bad.json";
  std::ofstream{bad} << R"({"every": "1h", "every": "2h", "task": {}})";
  auto dup = load_schedule_file(bad);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().where == bad);
  CHECK(dup.error().path == "/every");

  auto missing = load_schedule_file(dir.path + "/none.json");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().where == dir.path + "/none.json");
}

namespace {

void put_file(const std::string& dir, const std::string& rel,
              const std::string& text) {
  auto path = std::filesystem::path{dir} / rel;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

} // namespace

TEST_CASE("schedule names and run ids: a run is named by its schedule and "
          "its due time in UTC",
          "[schedule]") {
  CHECK(valid_schedule_name("nightly-flaky.v2"));
  CHECK(valid_schedule_name(std::string(47, 'a')));
  CHECK_FALSE(valid_schedule_name(std::string(48, 'a')));
  for (auto bad : {"", ".", "..", "a/b", "a b", "ä"})
    CHECK_FALSE(valid_schedule_name(bad));
  // 2026-12-06 03:00:00 UTC; the fraction of a second is dropped.
  CHECK(schedule_run_id("nightly", 1796526000.75) ==
        "nightly-20261206T030000Z");
  CHECK(schedule_run_id(std::string(47, 'a'), 0).size() == 64);
}

TEST_CASE("schedule files in a config directory: loaded by name, their "
          "tasks checked against the config and their agents relative to "
          "the file",
          "[schedule]") {
  tasksup::test::temp_dir dir{"schedules"};
  put_file(dir.path, "environments/team.json",
           R"({"agents": [{"agent_id": "t", "agent_cli": "/bin/true"}]})");
  put_file(dir.path, "schedules/nightly.json",
           R"({"cron": "0 3 * * *", "time_zone": "Europe/Berlin",
               "task": {"prompt": "p", "environment": "team"}})");
  put_file(dir.path, "schedules/tick.json",
           R"({"every": "30s", "task": {"prompt": "p", "agent_selection":
               {"agents": [{"agent_id": "a", "agent_cli": "./bin/agent"}]}}})");
  auto cfg = load_config_dir(dir.path);
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg);
  REQUIRE(cfg->schedules.size() == 2);
  CHECK(std::get<cron_timing>(cfg->schedules.at("nightly").timing).time_zone ==
        "Europe/Berlin");
  auto& agents = cfg->schedules.at("tick")
                   .task.at("agent_selection")
                   .at("agents")
                   .as_array();
  CHECK(agents.at(0).at("agent_cli").as_string() ==
        dir.path + "/schedules/bin/agent");
  // A task that does not parse stops the load, naming the file and the
  // pointer under /task.
  put_file(
    dir.path, "schedules/tick.json",
    R"({"every": "30s", "task": {"prompt": "p", "environment": "nope"}})");
  auto bad = load_config_dir(dir.path);
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().where, Catch::EndsWith("schedules/tick.json"));
  CHECK(bad.error().path == "/task/environment");
  std::filesystem::remove(dir.path + "/schedules/tick.json");
  put_file(dir.path, "schedules/no good.json",
           R"({"every": "30s", "task": {"prompt": "p"}})");
  auto name = load_config_dir(dir.path);
  REQUIRE_FALSE(name);
  CHECK_THAT(name.error().what, Catch::Contains("invalid schedule name"));
}

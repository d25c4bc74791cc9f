// The "come back later" hint parser of rate-limited output: kept
// apart from the matching engine in classifier.cpp; the classifier runs it
// only on the window of a rule that classified an outcome as rate_limit.
#include "tasksup/supervisor/classifier.hpp"

#include "text_scan.hpp"

#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>

namespace tasksup {

namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::lower;
using detail::match_word;

/// Longest hint `parse_retry_after` accepts; beyond a day a number after
/// "retry after" is far more likely a timestamp than a real wait.
constexpr double max_retry_after_s = 86400.0;

/// Integer digits accepted in one duration component (keeps the arithmetic
/// exact and rejects epoch timestamps in milliseconds early).
constexpr std::size_t max_integer_digits = 12;

std::size_t skip_chars(std::string_view str, std::size_t pos,
                       std::string_view set) {
  while (pos < str.size() && set.find(str[pos]) != std::string_view::npos)
    ++pos;
  return pos;
}

/// Words of one "come back later" phrase; between words any run (possibly
/// empty) of spaces, tabs, '-' or '_' is allowed, so "Retry-After",
/// "retry_after", "retryAfter" and "retry after" are all one phrase.
struct retry_phrase {
  std::string_view words[3];
};

constexpr retry_phrase retry_phrases[] = {
  {{"retry", "after", {}}},    {{"retry", "in", {}}},
  {{"retry", "delay", {}}},    {{"try", "again", "in"}},
  {{"try", "again", "after"}},
};

constexpr std::string_view word_separators = " \t-_";

/// Between the phrase and the value: "Retry-After: 30", `"retryDelay": "38s"`,
/// "retry_after=5".
constexpr std::string_view value_separators = " \t:=\"'";

std::size_t match_phrase(std::string_view str, std::size_t pos,
                         const retry_phrase& phrase) {
  for (std::size_t i = 0; i < 3 && !phrase.words[i].empty(); ++i) {
    if (i > 0)
      pos = skip_chars(str, pos, word_separators);
    pos = match_word(str, pos, phrase.words[i]);
    if (pos == std::string_view::npos)
      return pos;
  }
  return pos;
}

struct duration_unit {
  std::string_view name;
  double seconds;
};

constexpr duration_unit duration_units[] = {
  {"ms", 0.001},
  {"msec", 0.001},
  {"msecs", 0.001},
  {"millisecond", 0.001},
  {"milliseconds", 0.001},
  {"s", 1},
  {"sec", 1},
  {"secs", 1},
  {"second", 1},
  {"seconds", 1},
  {"m", 60},
  {"min", 60},
  {"mins", 60},
  {"minute", 60},
  {"minutes", 60},
  {"h", 3600},
  {"hr", 3600},
  {"hrs", 3600},
  {"hour", 3600},
  {"hours", 3600},
};

std::optional<double> unit_seconds(std::string_view word) {
  for (const auto& unit : duration_units) {
    if (unit.name.size() != word.size())
      continue;
    if (match_word(word, 0, unit.name) != std::string_view::npos)
      return unit.seconds;
  }
  return std::nullopt;
}

/// Parses a decimal number ("30", "1.5") at `pos`; advances `pos`. Fails on
/// more than `max_integer_digits` integer digits.
std::optional<double> parse_number(std::string_view str, std::size_t& pos) {
  double value = 0;
  std::size_t digits = 0;
  while (pos < str.size() && is_digit(str[pos])) {
    if (++digits > max_integer_digits)
      return std::nullopt;
    value = value * 10 + (str[pos] - '0');
    ++pos;
  }
  if (pos + 1 < str.size() && str[pos] == '.' && is_digit(str[pos + 1])) {
    ++pos;
    double scale = 0.1;
    while (pos < str.size() && is_digit(str[pos])) {
      value += (str[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
  }
  return value;
}

/// Parses "30", "20s", "2 minutes", "1m30s", "1 minute 30 seconds" at
/// `pos`. A bare number is `bare_unit_s` seconds each and must not continue
/// like a date or clock time ("2024-01-01", "12:30"); an unknown unit word
/// ("3 attempts") means this is not a duration.
std::optional<double> parse_duration(std::string_view str, std::size_t pos,
                                     double bare_unit_s) {
  double total = 0;
  bool any = false;
  while (pos < str.size() && is_digit(str[pos])) {
    auto value = parse_number(str, pos);
    if (!value)
      return std::nullopt;
    auto word_begin = skip_chars(str, pos, " \t");
    auto word_end = word_begin;
    while (word_end < str.size() && is_alpha(str[word_end]))
      ++word_end;
    auto word = str.substr(word_begin, word_end - word_begin);
    if (word.empty()) {
      if (any)
        break; // "1m 30": the trailing number has no unit, ignore it
      if (pos + 1 < str.size() &&
          std::string_view{"-:/.,"}.find(str[pos]) != std::string_view::npos &&
          is_digit(str[pos + 1]))
        return std::nullopt;
      return *value * bare_unit_s;
    }
    auto unit = unit_seconds(word);
    if (!unit) {
      if (any)
        break;
      return std::nullopt;
    }
    total += *value * *unit;
    any = true;
    pos = skip_chars(str, word_end, " \t,");
    if (auto after_and = match_word(str, pos, "and");
        after_and != std::string_view::npos)
      pos = skip_chars(str, after_and, " \t");
  }
  if (!any)
    return std::nullopt;
  return total;
}

/// Whether `line` contains "try" in any case: every hint phrase does, and
/// most lines have none, so this one cheap pass settles them.
bool has_try(std::string_view line) {
  // 'y' is rare in text: find each one (memchr runs many bytes per step)
  // and look at the two bytes before it.
  for (char y : {'y', 'Y'}) {
    const char* at = line.data();
    const char* end = line.data() + line.size();
    while (at < end) {
      const auto* hit = static_cast<const char*>(
        std::memchr(at, y, static_cast<std::size_t>(end - at)));
      if (hit == nullptr)
        break;
      if (hit - line.data() >= 2 && (hit[-2] | 0x20) == 't' &&
          (hit[-1] | 0x20) == 'r')
        return true;
      at = hit + 1;
    }
  }
  return false;
}

} // namespace

std::optional<double> parse_retry_after(std::string_view line) {
  if (!has_try(line))
    return std::nullopt;
  for (std::size_t pos = 0; pos < line.size(); ++pos) {
    auto c = lower(line[pos]);
    if (c != 'r' && c != 't')
      continue;
    for (const auto& phrase : retry_phrases) {
      auto end = match_phrase(line, pos, phrase);
      if (end == std::string_view::npos)
        continue;
      // "Retry-After-Ms: 500" / "retry_after_ms=500": bare numbers are ms.
      double bare_unit_s = 1;
      if (auto ms = match_word(line, skip_chars(line, end, "-_"), "ms");
          ms != std::string_view::npos &&
          (ms == line.size() || !is_alpha(line[ms]))) {
        bare_unit_s = 0.001;
        end = ms;
      }
      auto value = parse_duration(line, skip_chars(line, end, value_separators),
                                  bare_unit_s);
      if (value && *value >= 0 && *value <= max_retry_after_s)
        return value;
    }
  }
  return std::nullopt;
}

} // namespace tasksup

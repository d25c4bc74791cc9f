#pragma once

// The typed JSON reader behind config and task parsing. Internal to
// libsupervisor (src/ is not installed): everything here lives in
// `tasksup::detail` and may change with the parsers that use it.

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

namespace json = boost::json;

// -- limits on untrusted input ------------------------------------------------

/// Config and task files larger than this are rejected before parsing.
inline constexpr std::size_t max_file_bytes = 16 * 1024 * 1024;

/// Nesting deeper than this is rejected by the JSON parser.
inline constexpr unsigned max_json_depth = 64;

/// Any duration in seconds: at most one year, so that conversions to clock
/// durations cannot overflow.
inline constexpr double max_seconds = 365.0 * 24 * 3600;

/// Upper bound of `memory_limit_mb` (16 TiB); keeps the byte count in range.
inline constexpr std::int64_t max_memory_limit_mb = std::int64_t{1} << 24;

/// Ids (task ids, agent ids, environment names) are path components and
/// labels: [A-Za-z0-9_.-]{1,64}, and neither "." nor "..".
inline constexpr std::size_t max_id_length = 64;

inline constexpr int max_int = std::numeric_limits<int>::max();

// -- messages -----------------------------------------------------------------

/// Quotes untrusted text for an error message: escapes quotes, backslashes and
/// non-printable bytes, and shortens long text, so a hostile key cannot flood
/// or garble a terminal.
std::string quote(std::string_view str);

template<class Names>
std::string join_quoted(const Names& names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty())
      out += ", ";
    out += '"';
    out += name;
    out += '"';
  }
  return out;
}

template<class Names>
std::string join_plain(const Names& names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty())
      out += ", ";
    out += name;
  }
  return out;
}

/// Appends `/` and the object key `key` to the JSON pointer `pointer`,
/// escaped as RFC 6901 says (`~` -> `~0`, `/` -> `~1`): the one place keys
/// become pointer tokens.
void append_pointer_token(std::string& pointer, std::string_view key);

/// `path` extended by the object key `key` (`append_pointer_token`).
std::string child(const std::string& path, std::string_view key);

/// `path` extended by the array index `index`.
std::string child(const std::string& path, std::size_t index);

/// A key that appears twice in one object.
struct duplicate_key {
  /// The JSON pointer of its second occurrence.
  std::string pointer;
  std::string key;
};

/// The first key of the JSON `text` that appears twice in one object, or
/// nullopt when there is none or the text is not JSON (the real parser
/// reports that).
std::optional<duplicate_key> find_duplicate_key(std::string_view text);

/// A JSON pointer made fit for a message: each component cut after 64
/// bytes with "...", control and non-ASCII bytes as `\xNN`, the whole at
/// most about 400 bytes (its start and end kept).
std::string shown_pointer(std::string_view path);

/// A message cut to at most about 1,000 bytes.
std::string shown_message(std::string what);

/// [A-Za-z0-9_.-]{1,64}, and neither "." nor "..".
bool valid_identifier(std::string_view str) noexcept;

/// The `.json` files directly in `dir`, sorted by name (none when `dir` is
/// not a directory); an error names `dir` when it cannot be listed. How
/// every `<kind>/<name>.json` directory of a config directory is read.
expected<std::vector<std::filesystem::path>>
json_files_in(const std::string& dir);

// -- the reader ---------------------------------------------------------------

/// Unwinds from deep inside a document to the public function that started
/// the parse, which turns it into an `expected`. Never leaves this file.
struct parse_failure {
  error err;
};

/// Typed access to a JSON document with errors naming `where`, the JSON
/// pointer and what was expected.
class reader {
public:
  explicit reader(std::string_view where) : where_(where) {}

  /// A reader whose agents may name the user profiles in `profiles` (and
  /// the built-in ones); it must outlive the reader.
  reader(std::string_view where, const profile_map& profiles)
    : where_(where), profiles_(&profiles) {}

  /// The user profiles agents may name besides the built-in ones.
  const profile_map& profiles() const noexcept {
    static const profile_map none;
    return profiles_ != nullptr ? *profiles_ : none;
  }

  /// Throws the error at `path`; both are cut to a readable length.
  [[noreturn]] void fail(const std::string& path, std::string what) const {
    throw parse_failure{
      error{where_, shown_pointer(path), shown_message(std::move(what))}};
  }

  const std::string& where() const noexcept { return where_; }

  const json::object& object(const json::value& v,
                             const std::string& path) const {
    if (!v.is_object())
      fail(path, "expected an object");
    return v.get_object();
  }

  const json::array& array(const json::value& v,
                           const std::string& path) const {
    if (!v.is_array())
      fail(path, "expected an array");
    return v.get_array();
  }

  std::string string(const json::value& v, const std::string& path) const {
    if (!v.is_string())
      fail(path, "expected a string");
    const auto& str = v.get_string();
    return std::string{str.data(), str.size()};
  }

  std::string nonempty_string(const json::value& v,
                              const std::string& path) const {
    auto str = string(v, path);
    if (str.empty())
      fail(path, "expected a non-empty string");
    return str;
  }

  std::string identifier(const json::value& v, const std::string& path,
                         std::string_view what) const {
    auto str = string(v, path);
    if (!valid_identifier(str))
      fail(path, "expected " + std::string{what} +
                   " of 1 to 64 characters from [A-Za-z0-9_.-] (not \".\" "
                   "or \"..\"), got " +
                   quote(str));
    return str;
  }

  bool boolean(const json::value& v, const std::string& path) const {
    if (!v.is_bool())
      fail(path, "expected true or false");
    return v.get_bool();
  }

  /// An integer in [lo, hi]; JSON numbers with a fraction or exponent are
  /// not integers here.
  std::int64_t integer(const json::value& v, const std::string& path,
                       std::int64_t lo, std::int64_t hi) const {
    if (v.is_int64()) {
      auto x = v.get_int64();
      if (x < lo || x > hi)
        integer_range_error(path, lo, hi);
      return x;
    }
    if (v.is_uint64()) {
      auto x = v.get_uint64();
      if (x > static_cast<std::uint64_t>(hi))
        integer_range_error(path, lo, hi);
      return static_cast<std::int64_t>(x);
    }
    integer_range_error(path, lo, hi);
  }

  int int_value(const json::value& v, const std::string& path, int lo,
                int hi = max_int) const {
    return static_cast<int>(integer(v, path, lo, hi));
  }

  /// A finite number of at least `lo` (above `lo` when `lo_open`) and at most
  /// `hi`.
  double number(const json::value& v, const std::string& path, double lo,
                bool lo_open, double hi) const {
    double x = 0;
    if (v.is_double())
      x = v.get_double();
    else if (v.is_int64())
      x = static_cast<double>(v.get_int64());
    else if (v.is_uint64())
      x = static_cast<double>(v.get_uint64());
    else
      fail(path, "expected a number");
    if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
      std::string what = "expected a finite number ";
      what += lo_open ? "> " : ">= ";
      what += format_number(lo);
      what += " and <= ";
      what += format_number(hi);
      fail(path, std::move(what));
    }
    return x;
  }

  /// Seconds: a number in [0, one year], or (0, one year] when `positive`.
  double seconds(const json::value& v, const std::string& path,
                 bool positive = false) const {
    return number(v, path, 0.0, positive, max_seconds);
  }

  /// Fails on the first key of `obj` not in `allowed`, naming it and listing
  /// the allowed ones.
  void check_keys(const json::object& obj, const std::string& path,
                  std::initializer_list<std::string_view> allowed) const {
    for (const auto& kv : obj) {
      std::string_view key{kv.key().data(), kv.key().size()};
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(child(path, key), "unknown key " + quote(key) +
                                 " (allowed: " + join_plain(allowed) + ")");
    }
  }

  const json::value& required(const json::object& obj, const std::string& path,
                              std::string_view key) const {
    const auto* v = obj.if_contains(key);
    if (v == nullptr)
      fail(path, "missing required key " + quote(key));
    return *v;
  }

private:
  [[noreturn]] void integer_range_error(const std::string& path,
                                        std::int64_t lo,
                                        std::int64_t hi) const {
    if (hi == std::numeric_limits<std::int64_t>::max() || hi == max_int) {
      if (lo == 0)
        fail(path, "expected a non-negative integer");
      if (lo == 1)
        fail(path, "expected a positive integer");
      fail(path, "expected an integer >= " + std::to_string(lo));
    }
    fail(path, "expected an integer from " + std::to_string(lo) + " to " +
                 std::to_string(hi));
  }

  /// `x` as a person writes it: 31536000, not 3.1536e+07.
  static std::string format_number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.15g", x);
    return buf;
  }

  std::string where_;
  const profile_map* profiles_ = nullptr;
};

template<class Enum, class Parse,
         class Names = std::initializer_list<std::string_view>>
Enum enum_value(const reader& r, const json::value& v, const std::string& path,
                Parse parse, const Names& names) {
  auto str = r.string(v, path);
  if (auto x = parse(str))
    return *x;
  r.fail(path, "expected one of " + join_quoted(names) + ", got " + quote(str));
}

template<class F>
auto guarded(F&& fn) -> expected<decltype(fn())> {
  try {
    return fn();
  } catch (parse_failure& failure) {
    return std::move(failure.err);
  }
}

} // namespace tasksup::detail

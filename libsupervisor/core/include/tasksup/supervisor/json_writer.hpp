#pragma once

// The one JSON writer of tasksup: the events (actors/src/events.cpp), the
// node's figures (node_stats: the dashboard and `/agents`) and the commands'
// `--json` output (apps/json_text.cpp) all write through it, so every JSON
// text tasksup prints escapes strings and spells numbers the same way.

#include <boost/json/fwd.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tasksup {

namespace detail {

/// Lowercase hex digits, for ids and `\u00XX` escapes.
inline constexpr char hex_chars[] = "0123456789abcdef";

} // namespace detail

/// Room `format_json_number` needs (the longest double in fixed notation).
inline constexpr std::size_t max_json_number_chars = 332;

/// Writes `x` as a JSON number at `out` (room for `max_json_number_chars`)
/// and returns its length: the shortest digits that read back as `x`, never
/// in exponent form, always with a fraction (`30.0`, `1795362464.5893607`);
/// `null` for NaN and infinities, which JSON cannot spell. The one number
/// rule of every JSON text tasksup writes.
std::size_t format_json_number(double x, char* out);

/// Appends `format_json_number(x)` to `out`.
void append_json_number(std::string& out, double x);

/// Appends `s` to `out` as a JSON string, quoted and escaped as Boost.JSON's
/// serializer does (quotes, backslashes and control characters; other bytes
/// as they are, so `s` should be valid UTF-8).
void append_json_string(std::string& out, std::string_view s);

/// Writes one JSON document straight into a string, byte for byte what
/// `boost::json::serialize` produces for the same object built key by key
/// (same escaping), except numbers, which never take exponent form
/// (`format_json_number`); it does so without building the object:
/// rendering events through `boost::json::object` cost ~18 % of the CPU of
/// a supervised attempt (BENCHMARKS.md §1). UTF-8 is checked with
/// text.hpp's functions and repaired with `sanitize_utf8`.
class json_writer {
public:
  /// Room for a typical event (~250 bytes) from the start.
  json_writer() { grow(128); }

  /// Writes on after the text already in `start`, with no comma before the
  /// first value; `release` gives the whole text back.
  explicit json_writer(std::string start) : out_{std::move(start)} {
    auto used = out_.size();
    out_.resize(used + 128);
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  void begin_object() {
    separator();
    put('{');
    first_ = true;
  }

  void end_object() {
    put('}');
    first_ = false;
  }

  void begin_array() {
    separator();
    put('[');
    first_ = true;
  }

  void end_array() {
    put(']');
    first_ = false;
  }

  /// An object key; the value written next belongs to it. For the fixed
  /// names of the code (event keys, class and state names): plain ASCII
  /// that needs no escaping, copied as is.
  void key(std::string_view k) {
    separator();
    reserve(k.size() + 3);
    *p_++ = '"';
    copy(k);
    *p_++ = '"';
    *p_++ = ':';
    first_ = true; // no comma before the value
  }

  /// An object key from data (a parsed document's): quoted and escaped as
  /// `raw_string` does.
  void any_key(std::string_view k) {
    raw_string(k);
    put(':');
    first_ = true;
  }

  /// A string as is (known-valid text: kind names, ids).
  void raw_string(std::string_view s) {
    separator();
    if (plain(s))
      quoted(s);
    else
      escaped(s);
  }

  /// Untrusted text: invalid UTF-8 is replaced by U+FFFD first.
  void string(std::string_view s);

  void integer(std::int64_t x) {
    separator();
    reserve(24);
    p_ = std::to_chars(p_, p_ + 24, x).ptr;
  }

  void unsigned_integer(std::uint64_t x) {
    separator();
    reserve(24);
    p_ = std::to_chars(p_, p_ + 24, x).ptr;
  }

  void number(double x) {
    separator();
    // Formatted aside: reserving the longest number's room would grow the
    // buffer of most events once more for a timestamp's 18 bytes.
    char buf[max_json_number_chars];
    append({buf, format_json_number(x, buf)});
  }

  /// `x`, or null when absent.
  void number(const std::optional<double>& x) {
    if (x)
      number(*x);
    else
      null();
  }

  void boolean(bool x) {
    separator();
    append(x ? std::string_view{"true"} : std::string_view{"false"});
  }

  void null() {
    separator();
    append("null");
  }

  /// A JSON text written elsewhere (an event's rendered line), as is.
  void raw(std::string_view json) {
    separator();
    append(json);
  }

  /// `v` as Boost.JSON's serializer writes it, but with this writer's
  /// numbers; strings and keys as they are (`raw_string`).
  void value(const boost::json::value& v);

  /// The document written; the writer is spent.
  std::string take();

  /// The text written, its buffer as it grew (for a writer that goes on
  /// writing into the caller's string); the writer is spent.
  std::string release() {
    out_.resize(static_cast<std::size_t>(p_ - out_.data()));
    p_ = end_ = nullptr;
    return std::move(out_);
  }

private:
  // The text is written through a cursor into `out_`, sized ahead (`grow`)
  // and cut to length by `take`: appending to a std::string piece by piece
  // cost more than the text itself (BENCHMARKS.md §1).

  /// Room for `n` more bytes at the cursor.
  void reserve(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n)
      grow(n);
  }

  void grow(std::size_t n);

  void put(char c) {
    reserve(1);
    *p_++ = c;
  }

  /// Copies `s` to the cursor; the room must be reserved.
  void copy(std::string_view s) {
    if (!s.empty())
      std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }

  void append(std::string_view s) {
    reserve(s.size());
    copy(s);
  }

  void separator() {
    if (!first_)
      put(',');
    first_ = false;
  }

  /// True if `s` is printable ASCII without quotes or backslashes: the
  /// common case (ids, names, numbers as text), copied in one piece. Checks
  /// eight bytes at a time (ids are 16 and 32 bytes long).
  static bool plain(std::string_view s) noexcept {
    constexpr std::uint64_t ones = 0x0101010101010101ull;
    constexpr std::uint64_t highs = 0x8080808080808080ull;
    // A byte of `x` is zero: the classic SWAR test.
    auto has_zero = [](std::uint64_t x) { return (x - ones) & ~x & highs; };
    std::size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      std::uint64_t x;
      std::memcpy(&x, s.data() + i, 8);
      // Bytes >= 0x80, then bytes < 0x20 (x - 0x20 borrows into the high
      // bit only for those, once the high bytes are ruled out), '"', '\\'.
      if ((x & highs) != 0 || ((x - 0x20 * ones) & highs) != 0 ||
          has_zero(x ^ ('"' * ones)) != 0 || has_zero(x ^ ('\\' * ones)) != 0)
        return false;
    }
    for (; i < s.size(); ++i) {
      auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\')
        return false;
    }
    return true;
  }

  void quoted(std::string_view s) {
    reserve(s.size() + 2);
    *p_++ = '"';
    copy(s);
    *p_++ = '"';
  }

  /// `s` quoted with JSON escapes (at most 6 bytes per input byte).
  void escaped(std::string_view s);

  std::string out_;
  char* p_ = nullptr;
  char* end_ = nullptr;
  bool first_ = true;
};

} // namespace tasksup

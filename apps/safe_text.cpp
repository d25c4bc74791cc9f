#include "safe_text.hpp"

#include <cstddef>

namespace tasksup::app {

namespace {

void append_hex(std::string& out, unsigned char c) {
  static constexpr char digits[] = "0123456789abcdef";
  out += "\\x";
  out += digits[c >> 4];
  out += digits[c & 0xf];
}

bool is_continuation(unsigned char c) noexcept {
  return (c & 0xc0) == 0x80;
}

/// Length of the valid UTF-8 sequence starting at `str[i]`, or 0 when the
/// bytes there do not form one (RFC 3629: no overlong forms, no surrogates,
/// nothing above U+10FFFF).
std::size_t sequence_length(std::string_view str, std::size_t i) noexcept {
  auto byte = [&](std::size_t k) -> unsigned char {
    return i + k < str.size() ? static_cast<unsigned char>(str[i + k]) : 0;
  };
  unsigned char c = byte(0);
  if (c < 0x80)
    return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0)
      lo = 0xa0;
    else if (c == 0xed)
      hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0)
      lo = 0x90;
    else if (c == 0xf4)
      hi = 0x8f;
  } else {
    return 0;
  }
  if (i + len > str.size())
    return 0;
  unsigned char second = byte(1);
  if (second < lo || second > hi)
    return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (!is_continuation(byte(k)))
      return 0;
  return len;
}

std::string convert(std::string_view str, bool escape_controls) {
  std::string out;
  out.reserve(str.size());
  std::size_t i = 0;
  while (i < str.size()) {
    auto c = static_cast<unsigned char>(str[i]);
    auto len = sequence_length(str, i);
    if (len == 0) {
      append_hex(out, c);
      ++i;
      continue;
    }
    bool control =
      (len == 1 && ((c < 0x20 && c != '\t') || c == 0x7f)) ||
      (len == 2 && c == 0xc2 && static_cast<unsigned char>(str[i + 1]) < 0xa0);
    if (escape_controls && control) {
      for (std::size_t k = 0; k < len; ++k)
        append_hex(out, static_cast<unsigned char>(str[i + k]));
    } else {
      out.append(str.substr(i, len));
    }
    i += len;
  }
  return out;
}

} // namespace

std::string utf8_or_escaped(std::string_view str) {
  return convert(str, false);
}

std::string printable(std::string_view str) {
  return convert(str, true);
}

} // namespace tasksup::app

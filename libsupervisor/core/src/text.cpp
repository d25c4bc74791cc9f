#include "tasksup/supervisor/text.hpp"

#include <cstdint>
#include <cstring>

namespace tasksup {

utf8_scan scan_utf8(std::string_view s, std::size_t i) noexcept {
  auto c = static_cast<unsigned char>(s[i]);
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  utf8_scan r;
  if (c >= 0xC2 && c <= 0xDF) {
    r.len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    r.len = 3;
    if (c == 0xE0)
      lo = 0xA0; // no overlong 3-byte forms
    else if (c == 0xED)
      hi = 0x9F; // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    r.len = 4;
    if (c == 0xF0)
      lo = 0x90; // no overlong 4-byte forms
    else if (c == 0xF4)
      hi = 0x8F; // nothing above U+10FFFF
  } else {
    return r;
  }
  r.valid = 1;
  for (; r.valid < r.len && i + r.valid < s.size(); ++r.valid) {
    auto b = static_cast<unsigned char>(s[i + r.valid]);
    auto min = r.valid == 1 ? lo : static_cast<unsigned char>(0x80);
    auto max = r.valid == 1 ? hi : static_cast<unsigned char>(0xBF);
    if (b < min || b > max)
      break;
  }
  return r;
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  if (static_cast<unsigned char>(s[i]) < 0x80)
    return 1;
  auto r = scan_utf8(s, i);
  return r.len != 0 && r.valid == r.len ? r.len : 0;
}

std::size_t first_invalid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII eight bytes at a time: most text (ids, names, log lines) is.
    constexpr std::uint64_t highs = 0x8080808080808080ull;
    std::uint64_t word;
    while (i + 8 <= s.size() &&
           (std::memcpy(&word, s.data() + i, 8), (word & highs) == 0))
      i += 8;
    if (i == s.size())
      break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    auto r = scan_utf8(s, i);
    if (r.len == 0 || r.valid != r.len)
      return i;
    i += r.len;
  }
  return std::string_view::npos;
}

bool lower_hex(std::string_view s) noexcept {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

bool valid_utf8(std::string_view s) noexcept {
  return first_invalid_utf8(s) == std::string_view::npos;
}

std::string sanitize_utf8(std::string_view s) {
  // Each maximal invalid subpart becomes one U+FFFD.
  static constexpr std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      // A run of ASCII in one piece.
      auto end = i + 1;
      while (end < s.size() && static_cast<unsigned char>(s[end]) < 0x80)
        ++end;
      out.append(s.substr(i, end - i));
      i = end;
      continue;
    }
    auto r = scan_utf8(s, i);
    if (r.len == 0) {
      out.append(replacement);
      ++i;
    } else if (r.valid == r.len) {
      out.append(s.substr(i, r.len));
      i += r.len;
    } else {
      out.append(replacement);
      i += r.valid;
    }
  }
  return out;
}

} // namespace tasksup

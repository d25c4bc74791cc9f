#pragma once

// ASCII scanning helpers shared by the parsers of untrusted output lines
// (retry-after hints, quota resets): locale-free, allocation-free, each
// bounded by the line.

#include <cstddef>
#include <string_view>

namespace tasksup::detail {

inline char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

inline bool is_alpha(char c) {
  auto l = lower(c);
  return l >= 'a' && l <= 'z';
}

/// Case-insensitive `word` (written in lowercase) at `pos`: the position
/// after it, or npos.
inline std::size_t match_word(std::string_view str, std::size_t pos,
                              std::string_view word) {
  if (pos > str.size() || str.size() - pos < word.size())
    return std::string_view::npos;
  for (std::size_t i = 0; i < word.size(); ++i)
    if (lower(str[pos + i]) != word[i])
      return std::string_view::npos;
  return pos + word.size();
}

} // namespace tasksup::detail

#include "tasksup/supervisor/shlex.hpp"

#include <cstddef>

namespace tasksup {

namespace {

bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

error split_error(std::string what) {
  return error{std::string{}, std::string{}, std::move(what)};
}

} // namespace

expected<std::vector<std::string>> shlex_split(std::string_view str) {
  std::vector<std::string> words;
  std::string word;
  // A word exists once any character of it was seen, even an empty pair of
  // quotes: `''` is one empty argument, as in sh.
  bool in_word = false;
  std::size_t i = 0;
  const std::size_t n = str.size();
  while (i < n) {
    char c = str[i];
    if (is_blank(c)) {
      if (in_word) {
        words.push_back(std::move(word));
        word.clear();
        in_word = false;
      }
      ++i;
      continue;
    }
    if (c == '\\') {
      if (i + 1 == n)
        return split_error("trailing backslash at offset " + std::to_string(i));
      // Backslash-newline is a line continuation and vanishes without
      // starting a word.
      if (str[i + 1] != '\n') {
        word += str[i + 1];
        in_word = true;
      }
      i += 2;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      auto close = str.find('\'', i + 1);
      if (close == std::string_view::npos)
        return split_error("unbalanced single quote at offset " +
                           std::to_string(i));
      word.append(str.substr(i + 1, close - i - 1));
      i = close + 1;
      continue;
    }
    if (c == '"') {
      std::size_t open = i++;
      bool closed = false;
      while (i < n) {
        char d = str[i];
        if (d == '"') {
          closed = true;
          ++i;
          break;
        }
        if (d == '\\' && i + 1 < n) {
          char e = str[i + 1];
          if (e == '"' || e == '\\' || e == '$' || e == '`') {
            word += e;
            i += 2;
            continue;
          }
          if (e == '\n') {
            i += 2;
            continue;
          }
        }
        // Any other backslash stays literal inside double quotes.
        word += d;
        ++i;
      }
      if (!closed)
        return split_error("unbalanced double quote at offset " +
                           std::to_string(open));
      continue;
    }
    word += c;
    ++i;
  }
  if (in_word)
    words.push_back(std::move(word));
  return words;
}

} // namespace tasksup

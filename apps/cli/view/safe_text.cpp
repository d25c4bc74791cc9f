#include "safe_text.hpp"

#include <algorithm>

#include "tasksup/supervisor/text.hpp"

#include <cstddef>

namespace tasksup::app {

namespace {

void append_hex(std::string& out, unsigned char c) {
  static constexpr char digits[] = "0123456789abcdef";
  out += "\\x";
  out += digits[c >> 4];
  out += digits[c & 0xf];
}

std::string convert(std::string_view str, bool escape_controls) {
  std::string out;
  out.reserve(str.size());
  std::size_t i = 0;
  while (i < str.size()) {
    auto c = static_cast<unsigned char>(str[i]);
    auto len = utf8_sequence_length(str, i);
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

std::string cell(std::string_view text) {
  std::string out;
  for (unsigned char c : text)
    out += c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
  return out.empty() ? "-" : out;
}

void print_columns(std::ostream& out,
                   const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty())
    return;
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (auto& row : rows)
    for (std::size_t i = 0; i < row.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], row[i].size());
  for (auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size() && i < width.size())
        line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out << line << '\n';
  }
}

} // namespace tasksup::app

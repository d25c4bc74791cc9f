#include "config_reader.hpp"

#include <algorithm>

namespace tasksup::detail {

std::string quote(std::string_view str) {
  constexpr std::size_t max_shown = 80;
  std::string out = "\"";
  std::size_t shown = 0;
  for (unsigned char c : str) {
    if (shown++ == max_shown) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

/// RFC 6901: `~` -> `~0`, `/` -> `~1`.
std::string child(const std::string& path, std::string_view key) {
  std::string out = path;
  out += '/';
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string child(const std::string& path, std::size_t index) {
  return path + '/' + std::to_string(index);
}

namespace {

bool is_id_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

} // namespace

bool valid_identifier(std::string_view str) noexcept {
  return !str.empty() && str.size() <= max_id_length && str != "." &&
         str != ".." && std::all_of(str.begin(), str.end(), is_id_char);
}

} // namespace tasksup::detail

#include "tasksup/supervisor/url_encode.hpp"

namespace tasksup {

std::string url_encode(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    bool plain = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
                 (u >= '0' && u <= '9') || u == '-' || u == '_' || u == '.' ||
                 u == '~';
    if (plain) {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 0xf];
    }
  }
  return out;
}

} // namespace tasksup

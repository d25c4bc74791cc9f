#include "node_address.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstdlib>
#include <netinet/in.h>

namespace tasksup::app {

std::string node_address::to_string() const {
  auto p = std::to_string(port);
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + p;
  return host + ":" + p;
}

expected<node_address> parse_node_address(std::string_view text,
                                          bool allow_port_zero) {
  auto bad = [&](const std::string& why) {
    return error{{},
                 {},
                 "invalid node address '" + std::string{text} + "': " + why +
                   " (expected HOST:PORT, e.g. 127.0.0.1:" +
                   std::to_string(default_node_port) + ")"};
  };
  node_address out;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':')
      return bad("an IPv6 address must be written [ADDRESS]:PORT");
    out.host = std::string{text.substr(1, close - 1)};
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return bad("no port");
    if (text.find(':') != colon)
      return bad("an IPv6 address must be written [ADDRESS]:PORT");
    out.host = std::string{text.substr(0, colon)};
    port_text = text.substr(colon + 1);
  }
  if (out.host.empty())
    return bad("no host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port_text.data(),
                                   port_text.data() + port_text.size(), value);
  if (port_text.empty() || ec != std::errc{} ||
      end != port_text.data() + port_text.size() || value > 65535)
    return bad("the port must be a number from 1 to 65535");
  if (value == 0 && !allow_port_zero)
    return bad("the port must be a number from 1 to 65535");
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

std::string default_node_text() {
  if (const char* env = std::getenv("TASKSUP_NODE"); env && *env)
    return env;
  return "127.0.0.1:" + std::to_string(default_node_port);
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost")
    return true;
  std::string h{host};
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

} // namespace tasksup::app

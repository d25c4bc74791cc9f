#include "http_request.hpp"

#include <algorithm>
#include <cctype>

namespace tasksup::app {

namespace {

/// RFC 9110 tchar.
bool is_tchar(unsigned char c) {
  if (std::isalnum(c))
    return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return is_tchar(static_cast<unsigned char>(c));
  });
}

std::string lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

http_parse_result fail(int code, std::string reason) {
  http_parse_result r;
  r.status = http_parse_status::error;
  r.error_code = code;
  r.reason = std::move(reason);
  return r;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

} // namespace

const std::string* http_request::header(std::string_view name) const {
  for (auto& [k, v] : headers)
    if (k == name)
      return &v;
  return nullptr;
}

std::optional<std::string>
http_request::query_param(std::string_view key) const {
  std::string_view q = query;
  while (!q.empty()) {
    auto amp = q.find('&');
    auto part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    auto eq = part.find('=');
    auto k = percent_decode(part.substr(0, eq), true);
    if (!k || *k != key)
      continue;
    if (eq == std::string_view::npos)
      return std::string{};
    return percent_decode(part.substr(eq + 1), true);
  }
  return std::nullopt;
}

std::optional<std::string> percent_decode(std::string_view text,
                                          bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size())
        return std::nullopt;
      auto hi = hex_value(text[i + 1]);
      auto lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0)
        return std::nullopt;
      auto b = static_cast<char>(hi * 16 + lo);
      if (b == '\0')
        return std::nullopt;
      out += b;
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

http_parse_result parse_http_request(std::string_view buffer,
                                     const http_limits& limits,
                                     http_request& out) {
  // The request line first: a line too long is refused before the rest
  // arrives.
  auto eol = buffer.find("\r\n");
  if (eol == std::string_view::npos) {
    if (buffer.size() > limits.max_request_line)
      return fail(414, "the request line is longer than " +
                         std::to_string(limits.max_request_line) + " bytes");
    return {};
  }
  if (eol > limits.max_request_line)
    return fail(414, "the request line is longer than " +
                       std::to_string(limits.max_request_line) + " bytes");
  auto line = buffer.substr(0, eol);
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line");
  auto method = line.substr(0, sp1);
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto version = line.substr(sp2 + 1);
  if (!is_token(method))
    return fail(400, "malformed method");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.substr(0, 5) == "HTTP/")
      return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
    return fail(400, "malformed HTTP version");
  }
  if (target.empty() || target.front() != '/')
    return fail(400, "the request target must be a path");
  for (char ch : target) {
    auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f)
      return fail(400, "the request target has a forbidden byte");
  }

  // The header section ends with an empty line.
  auto head_start = eol + 2;
  auto end = buffer.find("\r\n\r\n", eol);
  std::size_t head_end; // just past the header section's last CRLF
  if (buffer.substr(head_start, 2) == "\r\n") {
    head_end = head_start;
  } else if (end == std::string_view::npos) {
    if (buffer.size() - head_start > limits.max_header_bytes)
      return fail(431, "the header section is longer than " +
                         std::to_string(limits.max_header_bytes) + " bytes");
    return {};
  } else {
    head_end = end + 2;
  }
  if (head_end - head_start > limits.max_header_bytes)
    return fail(431, "the header section is longer than " +
                       std::to_string(limits.max_header_bytes) + " bytes");

  http_request req;
  req.method = std::string{method};
  req.target = std::string{target};
  req.version = std::string{version};
  auto qmark = target.find('?');
  auto decoded = percent_decode(target.substr(0, qmark));
  if (!decoded)
    return fail(400, "malformed percent-encoding in the path");
  req.path = std::move(*decoded);
  if (qmark != std::string_view::npos)
    req.query = std::string{target.substr(qmark + 1)};

  auto pos = head_start;
  while (pos < head_end) {
    auto next = buffer.find("\r\n", pos);
    auto field = buffer.substr(pos, next - pos);
    pos = next + 2;
    if (field.empty())
      break;
    if (field.front() == ' ' || field.front() == '\t')
      return fail(400, "folded header lines are not accepted");
    if (req.headers.size() >= limits.max_headers)
      return fail(431, "more than " + std::to_string(limits.max_headers) +
                         " header fields");
    auto colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon)))
      return fail(400, "malformed header field");
    auto value = trim(field.substr(colon + 1));
    for (char ch : value) {
      auto c = static_cast<unsigned char>(ch);
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return fail(400, "a header value has a control character");
    }
    req.headers.emplace_back(lower(field.substr(0, colon)), value);
  }

  if (req.version == "HTTP/1.1" && !req.header("host"))
    return fail(400, "HTTP/1.1 requests need a Host header");
  if (req.header("transfer-encoding"))
    return fail(501, "Transfer-Encoding is not supported; send "
                     "Content-Length");
  std::size_t length = 0;
  const std::string* seen = nullptr;
  for (auto& [k, v] : req.headers) {
    if (k != "content-length")
      continue;
    if (seen && *seen != v)
      return fail(400, "conflicting Content-Length headers");
    seen = &v;
    if (v.empty() || v.size() > 12 ||
        !std::all_of(v.begin(), v.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      return fail(400, "malformed Content-Length");
    length = std::stoull(v);
  }
  if (length > limits.max_body)
    return fail(413, "the body is larger than " +
                       std::to_string(limits.max_body) + " bytes");
  auto body_start = head_end + 2;
  if (buffer.size() < body_start + length)
    return {};
  req.body = std::string{buffer.substr(body_start, length)};
  out = std::move(req);
  http_parse_result r;
  r.status = http_parse_status::complete;
  r.consumed = body_start + length;
  return r;
}

http_response text_response(int status, std::string text) {
  http_response r;
  r.status = status;
  r.body = std::move(text);
  if (r.body.empty() || r.body.back() != '\n')
    r.body += '\n';
  return r;
}

std::string_view http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 303:
      return "See Other";
    case 401:
      return "Unauthorized";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string serialize_response(const http_response& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " ";
  out += http_reason(r.status);
  out += "\r\nContent-Type: " + r.content_type;
  if (!r.stream)
    out += "\r\nContent-Length: " + std::to_string(r.body.size());
  out += "\r\nConnection: close\r\nX-Content-Type-Options: nosniff";
  for (auto& [k, v] : r.headers)
    out += "\r\n" + k + ": " + v;
  out += "\r\n\r\n";
  if (!head_only)
    out += r.body;
  return out;
}

} // namespace tasksup::app

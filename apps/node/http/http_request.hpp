#pragma once

// HTTP/1.1 requests as the node's metrics and dashboard server reads them:
// a parser for one request at the front of a buffer, with limits on every
// size, and the response text. Everything a client sends is untrusted: a
// request that breaks a rule or a limit gets its status code (400, 413, 414,
// 431, 501, 505), never a crash or an unbounded buffer.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::app {

/// Limits on one request, with their defaults.
struct http_limits {
  /// The request line ("GET /path HTTP/1.1"), bytes.
  std::size_t max_request_line = 4096;
  /// The header section after the request line, bytes.
  std::size_t max_header_bytes = 16384;
  /// Header fields at most.
  std::size_t max_headers = 64;
  /// Request body bytes at most (Content-Length).
  std::size_t max_body = 64 * 1024;
};

/// One parsed request.
struct http_request {
  std::string method;
  /// The request target as sent ("/api/tasks?x=1").
  std::string target;
  /// The target's path, percent-decoded ("/api/tasks").
  std::string path;
  /// The raw query string after '?', without it.
  std::string query;
  /// "HTTP/1.0" or "HTTP/1.1".
  std::string version;
  /// Header fields in order, names lowercased, values trimmed.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// The port the request came in on (set by the server; cookies are per
  /// host, not per port, so the dashboard names its cookie after it).
  unsigned short local_port = 0;

  /// The first header named `name` (lowercase), or null.
  const std::string* header(std::string_view name) const;

  /// The value of `key` in the query string (percent-decoded), if present.
  std::optional<std::string> query_param(std::string_view key) const;
};

/// How far a buffer got.
enum class http_parse_status { incomplete, complete, error };

/// The parser's verdict on the front of a buffer.
struct http_parse_result {
  http_parse_status status = http_parse_status::incomplete;
  /// The status code to answer with when `status` is error.
  int error_code = 0;
  /// Why, in words (for the response body).
  std::string reason;
  /// Bytes of the buffer the complete request used.
  std::size_t consumed = 0;
};

/// Parses the request at the front of `buffer` into `out`: incomplete until
/// the header section and the body have arrived (and within limits), then
/// complete; an error as soon as the bytes so far break a rule or a limit.
http_parse_result parse_http_request(std::string_view buffer,
                                     const http_limits& limits,
                                     http_request& out);

/// `%XX` sequences decoded (and '+' as space when `plus_is_space`); nullopt
/// for a malformed escape or a decoded NUL.
std::optional<std::string> percent_decode(std::string_view text,
                                          bool plus_is_space = false);

/// A response to send.
struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  /// Extra header fields ("Allow", "Cache-Control", ...).
  std::vector<std::pair<std::string, std::string>> headers;
  /// A stream (server-sent events): no Content-Length, the body goes on
  /// until the connection closes; `body` is its first bytes.
  bool stream = false;
};

/// A plain-text response with `status` and `text` as the body.
http_response text_response(int status, std::string text);

/// The reason phrase of a status code ("Not Found").
std::string_view http_reason(int status);

/// The response's bytes: status line, Content-Type, Content-Length (not for
/// a stream),
/// `Connection: close`, the extra headers, the body (omitted for HEAD).
std::string serialize_response(const http_response& r, bool head_only);

} // namespace tasksup::app

#pragma once

// The secret that guards the node's HTTP server (/metrics, the dashboard
// and its control buttons): 256 random bits kept in a file only the node's
// user can read, and the checks every request passes. A client proves it
// knows the secret with `Authorization: Bearer <token>` (what Prometheus
// sends from `authorization.credentials_file`) or with the cookie a browser
// gets by opening `/?token=<token>` once.

#include "http_request.hpp"

#include "tasksup/supervisor/expected.hpp"

#include <string>
#include <string_view>

namespace tasksup::app {

/// Bytes of randomness in a token (hex-encoded: twice as many digits).
inline constexpr std::size_t http_token_bytes = 32;

/// The token in `path`, created there (mode 0600, 256 random bits as 64 hex
/// digits, a new line) when the file does not exist. A file that other users
/// can read or write, or whose text is not such a token, is an error naming
/// the file.
expected<std::string> load_or_create_http_token(const std::string& path);

/// True when `a` equals `b`; the time taken depends only on their lengths.
bool same_secret(std::string_view a, std::string_view b) noexcept;

/// The cookie that carries the token for the server on `port` (cookies are
/// per host, not per port: two nodes on one machine must not clobber each
/// other's).
std::string http_token_cookie(unsigned short port);

/// How a request proved (or failed to prove) that it knows the token.
enum class http_auth {
  /// No token at all.
  missing,
  /// A token, not this one.
  wrong,
  /// The right token in `Authorization: Bearer`.
  bearer,
  /// The right token in the cookie.
  cookie,
};

/// Checks the Authorization header, else the cookie, against `token`.
http_auth check_http_auth(const http_request& req, std::string_view token);
} // namespace tasksup::app

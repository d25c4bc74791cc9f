#pragma once

// A webhook delivery's signature: the HMAC-SHA256 of its raw body under the
// trigger's secret, hex in a header as GitHub sends it
// (`X-Hub-Signature-256: sha256=<hex>`); a generic sender signs the same
// way. Checked on the bytes received, before the body is parsed
// (docs/BEHAVIOUR.md, Triggers: matching).

#include <string>
#include <string_view>

namespace tasksup {

/// The header GitHub sends the signature in.
inline constexpr std::string_view github_signature_header =
  "X-Hub-Signature-256";

/// Whether `header_value` is `sha256=` and the 64 hex digits (either case)
/// of the HMAC-SHA256 of `body` under `secret`, compared in constant time.
/// Anything else is false: another or no prefix, a digest of another
/// length, a non-hex digit, surrounding blanks, an empty secret.
bool verify_signature(std::string_view secret, std::string_view body,
                      std::string_view header_value) noexcept;

/// `sha256=` and the lowercase hex HMAC-SHA256 of `body` under `secret`:
/// the header value a sender puts on `body`. Empty only when OpenSSL
/// fails.
std::string sign_body(std::string_view secret, std::string_view body);

} // namespace tasksup

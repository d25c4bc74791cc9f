#include "tasksup/webhook/signature.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <climits>
#include <optional>

namespace tasksup {

namespace {

constexpr std::string_view prefix = "sha256=";

constexpr std::size_t digest_bytes = 32;

using digest = std::array<unsigned char, digest_bytes>;

/// HMAC-SHA256 of `body` under `secret`; nullopt when OpenSSL fails or the
/// secret is too long for its interface (a trigger's is at most 4 KiB).
std::optional<digest> hmac_sha256(std::string_view secret,
                                  std::string_view body) {
  if (secret.size() > static_cast<std::size_t>(INT_MAX))
    return std::nullopt;
  digest out{};
  unsigned int len = 0;
  // An empty body still needs a valid pointer.
  const auto* data =
    reinterpret_cast<const unsigned char*>(body.empty() ? "" : body.data());
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), data,
           body.size(), out.data(), &len) == nullptr ||
      len != digest_bytes)
    return std::nullopt;
  return out;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

} // namespace

bool verify_signature(std::string_view secret, std::string_view body,
                      std::string_view header_value) noexcept {
  if (secret.empty() ||
      header_value.size() != prefix.size() + 2 * digest_bytes ||
      header_value.substr(0, prefix.size()) != prefix)
    return false;
  // The header is the sender's, not a secret: decoding it may take
  // different times for different inputs; only the comparison may not.
  digest claimed{};
  auto hex = header_value.substr(prefix.size());
  for (std::size_t i = 0; i < digest_bytes; ++i) {
    auto hi = hex_value(hex[2 * i]);
    auto lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    claimed[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  auto actual = hmac_sha256(secret, body);
  return actual &&
         CRYPTO_memcmp(actual->data(), claimed.data(), digest_bytes) == 0;
}

std::string sign_body(std::string_view secret, std::string_view body) {
  static constexpr char digits[] = "0123456789abcdef";
  auto mac = hmac_sha256(secret, body);
  if (!mac)
    return {};
  std::string out{prefix};
  for (auto byte : *mac) {
    out += digits[byte >> 4];
    out += digits[byte & 0xf];
  }
  return out;
}

} // namespace tasksup

// A webhook delivery's signature (libsupervisor/webhook/src/signature.cpp):
// GitHub's documented vector, and every near miss refused. Tagged [trigger]
// too: the signature is the first check a trigger's delivery passes.

#include "tasksup/webhook/signature.hpp"

#include <catch2/catch.hpp>

#include <cctype>
#include <string>

using namespace tasksup;

namespace {

constexpr auto secret = "It's a Secret to Everybody";

} // namespace

TEST_CASE("signature: GitHub's documented vector and what is refused",
          "[signature][trigger]") {
  // docs.github.com, "Validating webhook deliveries".
  const std::string body = "Hello, World!";
  const std::string good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d75"
                           "86c22c46f4379c8b043e17";
  CHECK(verify_signature(secret, body, good));
  CHECK(sign_body(secret, body) == good);
  // Any case of hex.
  std::string upper = good;
  for (std::size_t i = 7; i < upper.size(); ++i)
    upper[i] = static_cast<char>(std::toupper(upper[i]));
  CHECK(verify_signature(secret, body, upper));

  std::string wrong = good;
  wrong.back() = '6';
  CHECK_FALSE(verify_signature(secret, body, wrong));
  CHECK_FALSE(verify_signature(secret, body, good.substr(0, good.size() - 2)));
  CHECK_FALSE(verify_signature(secret, body, good + "00"));
  CHECK_FALSE(verify_signature(secret, body, good.substr(7)));
  CHECK_FALSE(verify_signature(secret, body, "SHA256=" + good.substr(7)));
  CHECK_FALSE(verify_signature(secret, body, "sha1=" + good.substr(7)));
  CHECK_FALSE(verify_signature(secret, body, " " + good));
  CHECK_FALSE(verify_signature(secret, body, ""));
  std::string not_hex = good;
  not_hex[10] = 'g';
  CHECK_FALSE(verify_signature(secret, body, not_hex));
  // Another body or another secret.
  CHECK_FALSE(verify_signature(secret, "Hello, World!\n", good));
  CHECK_FALSE(verify_signature("It's a secret to everybody", body, good));
  CHECK_FALSE(verify_signature("", body, good));
  // An empty body has a signature too.
  CHECK(verify_signature(secret, "", sign_body(secret, "")));
}

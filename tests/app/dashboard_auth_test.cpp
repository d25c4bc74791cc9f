// The HTTP server's token: created once (0600, 256 random bits), reused,
// refused when others could read it; and how a request shows it.

#include "dashboard_auth.hpp"

#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <string>

using namespace tasksup::app;
using tasksup::test::temp_dir;

namespace {

http_request with_header(const std::string& name, const std::string& value,
                         unsigned short port = 7421) {
  http_request req;
  req.method = "GET";
  req.path = "/metrics";
  req.local_port = port;
  req.headers.emplace_back(name, value);
  return req;
}

} // namespace

TEST_CASE("http token: made once with mode 0600 and read back unchanged") {
  temp_dir dir{"token"};
  auto path = dir.path + "/http-token";
  auto first = load_or_create_http_token(path);
  REQUIRE(first);
  CHECK(first->size() == 64);
  CHECK(first->find_first_not_of("0123456789abcdef") == std::string::npos);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  auto again = load_or_create_http_token(path);
  REQUIRE(again);
  CHECK(*again == *first);
  // Another file gets another token.
  auto other = load_or_create_http_token(dir.path + "/other");
  REQUIRE(other);
  CHECK(*other != *first);
}

TEST_CASE("http token: a file others can read, or that is no token, is "
          "refused with its name") {
  temp_dir dir{"token"};
  auto path = dir.path + "/http-token";
  REQUIRE(load_or_create_http_token(path));
  REQUIRE(::chmod(path.c_str(), 0644) == 0);
  auto open = load_or_create_http_token(path);
  REQUIRE_FALSE(open);
  CHECK(open.error().to_string().find(path) != std::string::npos);
  CHECK(open.error().to_string().find("0644") != std::string::npos);

  auto junk = dir.path + "/junk";
  std::ofstream{junk} << "letmein\n";
  REQUIRE(::chmod(junk.c_str(), 0600) == 0);
  auto bad = load_or_create_http_token(junk);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().to_string().find("64 hex digits") != std::string::npos);

  auto missing_dir = load_or_create_http_token(dir.path + "/no/such/file");
  REQUIRE_FALSE(missing_dir);
  CHECK(missing_dir.error().to_string().find("cannot create") !=
        std::string::npos);
}

TEST_CASE("same_secret compares whole texts") {
  CHECK(same_secret("abc", "abc"));
  CHECK_FALSE(same_secret("abc", "abd"));
  CHECK_FALSE(same_secret("abc", "ab"));
  CHECK_FALSE(same_secret("", "a"));
}

TEST_CASE("a request shows the token as a bearer token or in its port's "
          "cookie") {
  std::string token(64, 'a');
  CHECK(check_http_auth(http_request{}, token) == http_auth::missing);
  CHECK(check_http_auth(with_header("authorization", "Bearer " + token),
                        token) == http_auth::bearer);
  CHECK(check_http_auth(with_header("authorization", "bearer " + token),
                        token) == http_auth::bearer);
  CHECK(check_http_auth(
          with_header("authorization", "Bearer " + std::string(64, 'b')),
          token) == http_auth::wrong);
  CHECK(check_http_auth(with_header("authorization", "Basic " + token),
                        token) == http_auth::wrong);
  CHECK(check_http_auth(
          with_header("cookie", "x=1; tasksup_token_7421=" + token + "; y=2"),
          token) == http_auth::cookie);
  // Another node's cookie on the same host does not count here.
  CHECK(check_http_auth(with_header("cookie", "tasksup_token_7000=" + token),
                        token) == http_auth::missing);
  CHECK(check_http_auth(
          with_header("cookie", "tasksup_token_7421=" + std::string(64, 'c')),
          token) == http_auth::wrong);
  CHECK(http_token_cookie(7421) == "tasksup_token_7421");
}

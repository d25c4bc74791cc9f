#include "dashboard_auth.hpp"

#include "tasksup/supervisor/text.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace tasksup::app {

namespace {

error token_error(const std::string& path, std::string what) {
  return error{"http token", path, std::move(what)};
}

bool is_token_text(std::string_view s) {
  return s.size() == http_token_bytes * 2 && lower_hex(s);
}

/// The value of cookie `name` in a Cookie header ("a=1; b=2"), if present.
std::optional<std::string_view> cookie_value(std::string_view header,
                                             std::string_view name) {
  while (!header.empty()) {
    auto semi = header.find(';');
    auto pair = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view{}
                                            : header.substr(semi + 1);
    while (!pair.empty() && pair.front() == ' ')
      pair.remove_prefix(1);
    auto eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name)
      return pair.substr(eq + 1);
  }
  return std::nullopt;
}

} // namespace

expected<std::string> load_or_create_http_token(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    unsigned char raw[http_token_bytes];
    if (RAND_bytes(raw, sizeof raw) != 1)
      return token_error(path, "no randomness for a new token");
    static constexpr char digits[] = "0123456789abcdef";
    std::string token;
    for (auto b : raw) {
      token += digits[b >> 4];
      token += digits[b & 0xf];
    }
    // Its directory (the state directory, for a node without a journal)
    // may not exist yet: made for this user only, one level.
    if (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0)
      ::mkdir(path.substr(0, slash).c_str(), 0700);
    // O_EXCL: a file that appeared meanwhile is not overwritten.
    int out = ::open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (out < 0)
      return token_error(path,
                         std::string{"cannot create: "} + std::strerror(errno));
    auto text = token + "\n";
    bool ok = ::fchmod(out, 0600) == 0 &&
              ::write(out, text.data(), text.size()) ==
                static_cast<ssize_t>(text.size()) &&
              ::fsync(out) == 0;
    auto saved = errno;
    ::close(out);
    if (!ok) {
      ::unlink(path.c_str());
      return token_error(path,
                         std::string{"cannot write: "} + std::strerror(saved));
    }
    return token;
  }
  if (fd < 0)
    return token_error(path,
                       std::string{"cannot read: "} + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return token_error(path, "not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return token_error(path, std::string{"other users can read or write it "
                                         "(mode "} +
                               mode + "); chmod 600 it");
  }
  char buf[256];
  auto n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n < 0)
    return token_error(path,
                       std::string{"cannot read: "} + std::strerror(errno));
  std::string_view text{buf, static_cast<std::size_t>(n)};
  while (!text.empty() &&
         (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.remove_suffix(1);
  if (!is_token_text(text))
    return token_error(path, "expected 64 hex digits (a token tasksup made; "
                             "delete the file to get a new one)");
  return std::string{text};
}

bool same_secret(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size())
    return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string http_token_cookie(unsigned short port) {
  return "tasksup_token_" + std::to_string(port);
}

http_auth check_http_auth(const http_request& req, std::string_view token) {
  if (auto* auth = req.header("authorization")) {
    std::string_view v{*auth};
    static constexpr std::string_view scheme = "bearer ";
    bool bearer = v.size() > scheme.size();
    for (std::size_t i = 0; bearer && i < scheme.size(); ++i)
      bearer = static_cast<char>(
                 std::tolower(static_cast<unsigned char>(v[i]))) == scheme[i];
    if (!bearer)
      return http_auth::wrong;
    auto given = v.substr(scheme.size());
    while (!given.empty() && given.front() == ' ')
      given.remove_prefix(1);
    return same_secret(given, token) ? http_auth::bearer : http_auth::wrong;
  }
  bool any = false;
  auto name = http_token_cookie(req.local_port);
  for (auto& [k, v] : req.headers) {
    if (k != "cookie")
      continue;
    if (auto given = cookie_value(v, name)) {
      any = true;
      if (same_secret(*given, token))
        return http_auth::cookie;
    }
  }
  return any ? http_auth::wrong : http_auth::missing;
}

} // namespace tasksup::app

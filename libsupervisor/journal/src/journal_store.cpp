#include "tasksup/journal/journal_store.hpp"

#include "backends.hpp"

namespace tasksup::journal {

std::string_view to_string(sync_mode x) noexcept {
  return x == sync_mode::normal ? "normal" : "full";
}

std::optional<sync_mode> parse_sync_mode(std::string_view text) noexcept {
  if (text == "full")
    return sync_mode::full;
  if (text == "normal")
    return sync_mode::normal;
  return std::nullopt;
}

bool is_postgresql_url(std::string_view text) noexcept {
  return text.rfind("postgresql://", 0) == 0 ||
         text.rfind("postgres://", 0) == 0;
}

std::string redact_url(std::string_view url) {
  // scheme://user:password@host... -> scheme://user@host...
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos)
    return std::string{url};
  auto rest = url.substr(scheme + 3);
  auto at = rest.find('@');
  auto slash = rest.find('/');
  if (at == std::string_view::npos ||
      (slash != std::string_view::npos && slash < at))
    return std::string{url};
  auto userinfo = rest.substr(0, at);
  auto colon = userinfo.find(':');
  if (colon == std::string_view::npos)
    return std::string{url};
  std::string out{url.substr(0, scheme + 3)};
  out += userinfo.substr(0, colon);
  out += rest.substr(at);
  return out;
}

journal_store::~journal_store() = default;

expected<std::unique_ptr<journal_store>>
journal_store::open(const store_options& opts) {
  if (opts.url.empty())
    return open_sqlite_store(opts);
  if (!is_postgresql_url(opts.url))
    return tasksup::error{opts.url, "",
                          "a journal URL starts with postgresql:// (or "
                          "postgres://)"};
  return open_postgres_store(opts);
}

} // namespace tasksup::journal

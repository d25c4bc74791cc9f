#include "tasksup/supervisor/account_quotas.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace tasksup {

namespace {

/// Longest account name kept (an identifier from configuration).
constexpr std::size_t max_account_bytes = 128;

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > max_account_bytes)
    return false;
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f)
      return false;
  return true;
}

} // namespace

void account_quotas::close(const std::string& account, double until_s,
                           double now_s) {
  if (!std::isfinite(until_s) || !(until_s > now_s) || !valid_name(account))
    return;
  if (auto i = until_.find(account); i != until_.end()) {
    i->second = std::max(i->second, until_s);
    return;
  }
  if (until_.size() >= max_accounts) {
    drop_expired(now_s);
    if (until_.size() >= max_accounts)
      return;
  }
  until_.emplace(account, until_s);
}

double account_quotas::closed_until(std::string_view account,
                                    double now_s) const {
  auto i = until_.find(account);
  return i != until_.end() && i->second > now_s ? i->second : 0.0;
}

void account_quotas::drop_expired(double now_s) {
  for (auto i = until_.begin(); i != until_.end();)
    i = i->second > now_s ? std::next(i) : until_.erase(i);
}

std::vector<std::pair<std::string, double>>
account_quotas::closed(double now_s) const {
  std::vector<std::pair<std::string, double>> out;
  for (auto& [name, until] : until_)
    if (until > now_s)
      out.emplace_back(name, until);
  return out;
}

std::string account_quotas::save() const {
  std::string out;
  char buf[40];
  for (auto& [name, until] : until_) {
    std::snprintf(buf, sizeof(buf), "\t%.17g\n", until);
    out += name;
    out += buf;
  }
  return out;
}

void account_quotas::restore(std::string_view text) {
  until_.clear();
  while (!text.empty() && until_.size() < max_accounts) {
    auto eol = text.find('\n');
    auto line = std::string{text.substr(0, eol)};
    text =
      eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    auto tab = line.find('\t');
    if (tab == std::string::npos)
      continue;
    auto name = line.substr(0, tab);
    char* end = nullptr;
    auto until = std::strtod(line.c_str() + tab + 1, &end);
    if (!valid_name(name) || end == line.c_str() + tab + 1 || *end != '\0' ||
        !std::isfinite(until))
      continue;
    until_.insert_or_assign(std::move(name), until);
  }
}

} // namespace tasksup

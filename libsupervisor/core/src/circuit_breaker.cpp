#include "tasksup/supervisor/circuit_breaker.hpp"

#include <cstdio>

#include <algorithm>
#include <iterator>

namespace tasksup {

namespace {

constexpr std::string_view state_names[] = {"closed", "open", "half_open"};

} // namespace

std::string_view to_string(breaker_state x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(state_names) ? state_names[i]
                                    : std::string_view{"unknown"};
}

circuit_breaker::circuit_breaker(circuit_breaker_config cfg) : cfg_(cfg) {
  cfg_.max_failures = std::max(cfg_.max_failures, 1);
}

bool circuit_breaker::allow(const std::string& key, double now_s) {
  auto i = entries_.find(key);
  // No entry means closed with no failures: nothing to record.
  if (i == entries_.end())
    return true;
  auto& e = i->second;
  e.last_used = now_s;
  switch (e.st) {
    case breaker_state::closed:
      return true;
    case breaker_state::open:
      if (now_s - e.opened_at < cfg_.reset_timeout_s)
        return false;
      e.st = breaker_state::half_open;
      e.probe_in_flight = true;
      e.opened_at = now_s;
      return true;
    case breaker_state::half_open:
      // A probe that never reported (its task was stopped, its node lost)
      // must not block the agent forever: after another reset timeout a new
      // probe may go.
      if (e.probe_in_flight && now_s - e.opened_at < cfg_.reset_timeout_s)
        return false;
      e.probe_in_flight = true;
      e.opened_at = now_s;
      return true;
  }
  return false;
}

void circuit_breaker::record_success(const std::string& key, double) {
  // A closed breaker without failures carries no state.
  entries_.erase(key);
}

void circuit_breaker::record_failure(const std::string& key, double now_s) {
  auto& e = entries_[key];
  e.last_used = now_s;
  switch (e.st) {
    case breaker_state::closed:
      if (++e.failures >= cfg_.max_failures) {
        e.st = breaker_state::open;
        e.opened_at = now_s;
      }
      break;
    case breaker_state::open:
      // A late report from an attempt started before the breaker opened:
      // the breaker is already open, its timeout keeps running.
      ++e.failures;
      break;
    case breaker_state::half_open:
      ++e.failures;
      e.st = breaker_state::open;
      e.opened_at = now_s;
      e.probe_in_flight = false;
      break;
  }
}

breaker_state circuit_breaker::state(const std::string& key,
                                     double now_s) const {
  auto i = entries_.find(key);
  if (i == entries_.end())
    return breaker_state::closed;
  const auto& e = i->second;
  if (e.st == breaker_state::open &&
      now_s - e.opened_at >= cfg_.reset_timeout_s)
    return breaker_state::half_open;
  return e.st;
}

void circuit_breaker::drop_stale(double now_s) {
  for (auto i = entries_.begin(); i != entries_.end();) {
    if (now_s - i->second.last_used >= cfg_.stale_after_s)
      i = entries_.erase(i);
    else
      ++i;
  }
}

std::size_t circuit_breaker::size() const noexcept {
  return entries_.size();
}

std::vector<std::string> circuit_breaker::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (auto& kv : entries_)
    out.push_back(kv.first);
  return out;
}

std::string circuit_breaker::save() const {
  std::string out;
  char buf[160];
  for (auto& [key, e] : entries_) {
    std::snprintf(buf, sizeof(buf), "\t%d\t%d\t%.17g\t%.17g\n", e.failures,
                  static_cast<int>(e.st), e.opened_at, e.last_used);
    out += key;
    out += buf;
  }
  return out;
}

void circuit_breaker::restore(std::string_view text) {
  entries_.clear();
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = std::string{text.substr(0, eol)};
    text =
      eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    auto tab = line.find('\t');
    if (tab == std::string::npos || tab == 0)
      continue;
    entry e;
    int st = 0;
    if (std::sscanf(line.c_str() + tab, "\t%d\t%d\t%lf\t%lf", &e.failures, &st,
                    &e.opened_at, &e.last_used) != 4 ||
        st < 0 || st > static_cast<int>(breaker_state::half_open) ||
        e.failures < 0)
      continue;
    // A half-open breaker's probe died with the old node: open again, so
    // the next request after the reset timeout probes anew.
    e.st = static_cast<breaker_state>(st) == breaker_state::half_open
             ? breaker_state::open
             : static_cast<breaker_state>(st);
    entries_.insert_or_assign(line.substr(0, tab), e);
  }
}

} // namespace tasksup

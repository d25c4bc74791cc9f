#include "tasksup/supervisor/supervisor_config.hpp"

#include "tasksup/supervisor/hash.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <type_traits>

namespace tasksup {

namespace {

std::uint64_t bits(double x) noexcept {
  std::uint64_t out;
  std::memcpy(&out, &x, sizeof(out));
  return out;
}

bool same(double a, double b) noexcept {
  return bits(a) == bits(b);
}

bool same(const std::optional<double>& a,
          const std::optional<double>& b) noexcept {
  return a.has_value() == b.has_value() && (!a || same(*a, *b));
}

bool same(const intensity_config& a, const intensity_config& b) noexcept {
  // Fails to compile when a field is added, so that it is compared too.
  const auto& [a_max, a_period, a_reset] = a;
  const auto& [b_max, b_period, b_reset] = b;
  return a_max == b_max && same(a_period, b_period) && same(a_reset, b_reset);
}

bool same(const backoff_spec& a, const backoff_spec& b) noexcept {
  const auto& [a_kind, a_table, a_initial, a_mult, a_max, a_jit] = a;
  const auto& [b_kind, b_table, b_initial, b_mult, b_max, b_jit] = b;
  if (a_kind != b_kind || a_table.size() != b_table.size() ||
      !same(a_initial, b_initial) || !same(a_mult, b_mult) ||
      !same(a_max, b_max) || a_jit != b_jit)
    return false;
  for (std::size_t i = 0; i < a_table.size(); ++i)
    if (!same(a_table[i], b_table[i]))
      return false;
  return true;
}

bool same(const attempt_steps& a, const attempt_steps& b) noexcept {
  const auto& [a_pre, a_gates, a_deliver, a_answer] = a;
  const auto& [b_pre, b_gates, b_deliver, b_answer] = b;
  return a_pre == b_pre && a_gates == b_gates && a_deliver == b_deliver &&
         a_answer == b_answer;
}

template<class T>
bool same_opt(const std::optional<T>& a, const std::optional<T>& b) noexcept {
  if (a.has_value() != b.has_value())
    return false;
  if (!a)
    return true;
  if constexpr (std::is_same_v<T, double> ||
                std::is_same_v<T, std::optional<double>> ||
                std::is_same_v<T, backoff_spec>)
    return same(*a, *b);
  else
    return *a == *b;
}

bool same_backoff_map(const std::map<error_class, backoff_spec>& a,
                      const std::map<error_class, backoff_spec>& b) noexcept {
  if (a.size() != b.size())
    return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
    if (i->first != j->first || !same(i->second, j->second))
      return false;
  return true;
}

/// Sets `to` to the value `from` names, if any.
template<class T>
void take(T& to, const std::optional<T>& from) {
  if (from)
    to = *from;
}

/// Mixes `x` into `seed`.
void mix(std::size_t& seed, std::uint64_t x) noexcept {
  hash_combine(seed, std::hash<std::uint64_t>{}(x));
}

void mix(std::size_t& seed, double x) noexcept {
  mix(seed, bits(x));
}

// Kept in declaration order; a unit test checks every value round-trips.
constexpr std::string_view restart_type_names[] = {"transient", "permanent",
                                                   "temporary"};

} // namespace

std::string_view to_string(restart_type x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(restart_type_names) ? restart_type_names[i]
                                           : std::string_view{"unknown"};
}

std::string_view to_string(fatal_scope x) noexcept {
  switch (x) {
    case fatal_scope::provider:
      return "provider";
    case fatal_scope::task:
      return "task";
  }
  return "provider";
}

std::optional<fatal_scope> parse_fatal_scope(std::string_view str) noexcept {
  for (auto x : {fatal_scope::provider, fatal_scope::task})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(quota_action x) noexcept {
  return x == quota_action::wait ? "wait" : "fallback";
}

std::optional<quota_action> parse_quota_action(std::string_view str) noexcept {
  for (auto x : {quota_action::wait, quota_action::fallback})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::optional<restart_type> parse_restart_type(std::string_view str) noexcept {
  for (auto x : {restart_type::transient, restart_type::permanent,
                 restart_type::temporary})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

bool same_settings(const supervisor_config& a,
                   const supervisor_config& b) noexcept {
  // Structured bindings name every field: adding one to supervisor_config
  // breaks the build here until it is compared (and hashed below).
  const auto& [a_retries, a_fallback, a_base, a_rl_base, a_total, a_crash,
               a_actions, a_restart, a_intensity, a_backoff, a_deadline,
               a_grace, a_fatal, a_attempt_timeout, a_done, a_restart_backoff,
               a_steps, a_on_quota, a_quota_wait] = a;
  const auto& [b_retries, b_fallback, b_base, b_rl_base, b_total, b_crash,
               b_actions, b_restart, b_intensity, b_backoff, b_deadline,
               b_grace, b_fatal, b_attempt_timeout, b_done, b_restart_backoff,
               b_steps, b_on_quota, b_quota_wait] = b;
  if (a_retries != b_retries || a_fallback != b_fallback ||
      !same(a_base, b_base) || !same(a_rl_base, b_rl_base) ||
      a_total != b_total || a_crash != b_crash || a_actions != b_actions ||
      a_restart != b_restart || !same(a_intensity, b_intensity) ||
      !same(a_deadline, b_deadline) || !same(a_grace, b_grace) ||
      a_fatal != b_fatal || a_backoff.size() != b_backoff.size() ||
      !same(a_attempt_timeout, b_attempt_timeout) || a_done != b_done ||
      !same(a_restart_backoff, b_restart_backoff) || !same(a_steps, b_steps) ||
      a_on_quota != b_on_quota || !same(a_quota_wait, b_quota_wait))
    return false;
  for (auto i = a_backoff.begin(), j = b_backoff.begin(); i != a_backoff.end();
       ++i, ++j)
    if (i->first != j->first || !same(i->second, j->second))
      return false;
  return true;
}

std::size_t settings_hash(const supervisor_config& cfg) noexcept {
  const auto& [retries, fallback, base, rl_base, total, crash, actions, restart,
               intensity, backoff, deadline, grace, fatal, attempt_timeout,
               done, restart_backoff, steps, on_quota, quota_wait] = cfg;
  std::size_t h = 0;
  mix(h, static_cast<std::uint64_t>(retries));
  mix(h, static_cast<std::uint64_t>(fallback));
  mix(h, base);
  mix(h, rl_base);
  mix(h, static_cast<std::uint64_t>(total));
  mix(h, static_cast<std::uint64_t>(crash));
  for (auto& [cls, act] : actions) {
    mix(h, static_cast<std::uint64_t>(cls));
    mix(h, static_cast<std::uint64_t>(act));
  }
  mix(h, static_cast<std::uint64_t>(restart));
  mix(h, static_cast<std::uint64_t>(fatal));
  mix(h, static_cast<std::uint64_t>(intensity.max_restarts));
  mix(h, intensity.period_s);
  mix(h, intensity.reset_after_s);
  auto mix_spec = [&h](const backoff_spec& spec) {
    mix(h, static_cast<std::uint64_t>(spec.kind));
    for (auto x : spec.table_s)
      mix(h, x);
    mix(h, spec.initial_s);
    mix(h, spec.multiplier);
    mix(h, spec.max_s);
    mix(h, static_cast<std::uint64_t>(spec.jit));
  };
  for (auto& [cls, spec] : backoff) {
    mix(h, static_cast<std::uint64_t>(cls));
    mix_spec(spec);
  }
  mix_spec(restart_backoff);
  mix(h, static_cast<std::uint64_t>(attempt_timeout.has_value()));
  if (attempt_timeout)
    mix(h, *attempt_timeout);
  mix(h, static_cast<std::uint64_t>(done.has_value()));
  if (done)
    mix(h, static_cast<std::uint64_t>(*done));
  mix(h, static_cast<std::uint64_t>(steps.preflight) |
           static_cast<std::uint64_t>(steps.gates) << 1 |
           static_cast<std::uint64_t>(steps.deliver) << 2);
  mix(h, static_cast<std::uint64_t>(deadline.has_value()));
  if (deadline)
    mix(h, *deadline);
  mix(h, grace);
  mix(h, on_quota ? static_cast<std::uint64_t>(*on_quota) + 1 : 0);
  mix(h, quota_wait);
  return h;
}

bool supervisor_overrides::empty() const noexcept {
  return same_overrides(*this, supervisor_overrides{});
}

void apply_overrides(supervisor_config& cfg, const supervisor_overrides& over) {
  // Structured bindings name every field: adding one to the overrides
  // breaks the build here until it is applied (and compared below).
  const auto& [retries, fallback, base, rl_base, total, crash, actions, restart,
               intensity, backoff, deadline, grace, fatal, attempt_timeout,
               done, restart_backoff, on_quota, quota_wait] = over;
  take(cfg.max_retries_per_agent, retries);
  take(cfg.enable_fallback, fallback);
  take(cfg.backoff_base_seconds, base);
  take(cfg.rate_limit_backoff_base, rl_base);
  take(cfg.max_total_attempts, total);
  take(cfg.max_crash_restarts, crash);
  for (const auto& [cls, act] : actions)
    cfg.actions[cls] = act;
  take(cfg.restart, restart);
  take(cfg.intensity.max_restarts, intensity.max_restarts);
  take(cfg.intensity.period_s, intensity.period_s);
  take(cfg.intensity.reset_after_s, intensity.reset_after_s);
  for (const auto& [cls, spec] : backoff)
    cfg.backoff[cls] = spec;
  take(cfg.deadline_s, deadline);
  take(cfg.stop_grace_s, grace);
  take(cfg.fatal, fatal);
  take(cfg.attempt_timeout_s, attempt_timeout);
  take(cfg.done_exit_code, done);
  take(cfg.restart_backoff, restart_backoff);
  take(cfg.on_quota, on_quota);
  take(cfg.quota_wait_s, quota_wait);
}

bool same_overrides(const supervisor_overrides& a,
                    const supervisor_overrides& b) noexcept {
  const auto& [a_retries, a_fallback, a_base, a_rl_base, a_total, a_crash,
               a_actions, a_restart, a_intensity, a_backoff, a_deadline,
               a_grace, a_fatal, a_attempt_timeout, a_done, a_restart_backoff,
               a_on_quota, a_quota_wait] = a;
  const auto& [b_retries, b_fallback, b_base, b_rl_base, b_total, b_crash,
               b_actions, b_restart, b_intensity, b_backoff, b_deadline,
               b_grace, b_fatal, b_attempt_timeout, b_done, b_restart_backoff,
               b_on_quota, b_quota_wait] = b;
  const auto& [a_max, a_period, a_reset] = a_intensity;
  const auto& [b_max, b_period, b_reset] = b_intensity;
  return a_retries == b_retries && a_fallback == b_fallback &&
         same_opt(a_base, b_base) && same_opt(a_rl_base, b_rl_base) &&
         a_total == b_total && a_crash == b_crash && a_actions == b_actions &&
         a_restart == b_restart && a_max == b_max &&
         same_opt(a_period, b_period) && same_opt(a_reset, b_reset) &&
         same_backoff_map(a_backoff, b_backoff) &&
         same_opt(a_deadline, b_deadline) && same_opt(a_grace, b_grace) &&
         a_fatal == b_fatal && same_opt(a_attempt_timeout, b_attempt_timeout) &&
         a_done == b_done && same_opt(a_restart_backoff, b_restart_backoff) &&
         a_on_quota == b_on_quota && same_opt(a_quota_wait, b_quota_wait);
}

} // namespace tasksup

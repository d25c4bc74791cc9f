#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup {

/// The accounts (API keys, subscriptions) whose usage quota is used up, and
/// when each reopens: one attempt that hits a plan's limit closes the
/// account for every task until the reset, so no other task spends an
/// attempt to learn the same. Unlike the circuit breaker this counts
/// nothing: a quota is closed by one answer and reopens at a time the
/// provider named. Times are seconds on the caller's scale (the node's
/// clock, moved onto the wall clock's).
class account_quotas {
public:
  /// Most accounts held: an account name comes from configuration, but a
  /// node must stay bounded whatever it is fed.
  static constexpr std::size_t max_accounts = 1024;

  /// Closes `account` until `until_s` (a later reset wins; an earlier one
  /// never reopens an account sooner). Ignored when `until_s` is not after
  /// `now_s`, or when the table is full of accounts still closed.
  void close(const std::string& account, double until_s, double now_s);

  /// When `account` reopens, or 0 when it is open at `now_s`.
  double closed_until(std::string_view account, double now_s) const;

  /// Forgets the accounts that have reopened by `now_s`.
  void drop_expired(double now_s);

  /// The accounts closed at `now_s`, in name order, with their reset times.
  std::vector<std::pair<std::string, double>> closed(double now_s) const;

  /// One line per account: name, tab, reset time.
  std::string save() const;

  /// Replaces the table with what `save` wrote; malformed lines, and
  /// names too long or with control characters, are skipped.
  void restore(std::string_view text);

private:
  std::map<std::string, double, std::less<>> until_;
};

} // namespace tasksup

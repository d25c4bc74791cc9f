#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// Settings of the per-agent circuit breaker (docs/BEHAVIOUR.md, Shared
/// health).
struct circuit_breaker_config {
  /// Consecutive non-fatal failures across tasks that open the breaker.
  int max_failures = 5;
  /// How long an open breaker stays open before letting one attempt through.
  double reset_timeout_s = 300.0;
  /// State of a key unused for this long is dropped.
  double stale_after_s = 3600.0;
};

/// Closed: attempts run. Open: attempts skip the agent. Half-open: one probe
/// attempt may run; its result closes or reopens the breaker.
enum class breaker_state { closed, open, half_open };

/// "closed", "open" or "half_open".
std::string_view to_string(breaker_state x) noexcept;

/// Circuit breakers keyed by agent id, shared by every task of a node. Time is
/// passed in; nothing here reads a clock.
class circuit_breaker {
public:
  /// Breakers with settings `cfg` (a `max_failures` below 1 counts as 1).
  explicit circuit_breaker(circuit_breaker_config cfg = {});

  /// Whether an attempt of `key` may start at `now_s`. Closed: yes. Open: no
  /// until `reset_timeout_s` has passed, then the breaker goes half-open and
  /// lets exactly one attempt through (this call returns true once; further
  /// calls return false until that attempt reports, or until another
  /// `reset_timeout_s` passed without a report, so a lost probe cannot block
  /// the agent forever).
  bool allow(const std::string& key, double now_s);

  /// An attempt of `key` succeeded: closes the breaker, clears the count.
  void record_success(const std::string& key, double now_s);

  /// An attempt of `key` failed (non-fatal classes only; the caller filters).
  /// Opens the breaker at `max_failures` consecutive failures, or at once when
  /// the half-open probe fails.
  void record_failure(const std::string& key, double now_s);

  /// Current state at `now_s` (open turns half-open once the timeout passed).
  breaker_state state(const std::string& key, double now_s) const;

  /// Drops the state of keys not touched for `stale_after_s`.
  void drop_stale(double now_s);

  /// Number of keys with state (for tests and status).
  std::size_t size() const noexcept;

  /// The keys with state, in order (for metrics and the dashboard).
  std::vector<std::string> keys() const;

  /// The breakers as text, one line per key (what a node journals).
  std::string save() const;

  /// Replaces the breakers with those `save` wrote; malformed lines are
  /// skipped. A probe that was in flight is not (its attempt is gone).
  void restore(std::string_view text);

private:
  struct entry {
    int failures = 0;
    breaker_state st = breaker_state::closed;
    /// When it opened, or when the last half-open probe went out.
    double opened_at = 0;
    bool probe_in_flight = false;
    double last_used = 0;
  };
  circuit_breaker_config cfg_;
  std::map<std::string, entry> entries_;
};

} // namespace tasksup

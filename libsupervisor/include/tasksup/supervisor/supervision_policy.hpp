#pragma once

#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/restart_window.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tasksup {

/// Everything the supervisor has done so far for one task: a plain record,
/// mutated only by `supervision_policy`.
struct supervision_state {
  /// Position in the agent chain.
  std::size_t agent_index = 0;
  /// Length of the agent chain (at least 1).
  std::size_t chain_size = 1;
  /// Retries of the current agent (0 after a switch).
  int retry_count = 0;
  /// Retries over the whole task.
  int total_retries = 0;
  /// Attempts started over the whole task.
  int total_attempts = 0;
  /// Agent switches over the whole task.
  int fallback_count = 0;
  /// Crash restarts over the whole task.
  int crash_restarts = 0;
  /// Restart times, for `permanent` tasks.
  restart_window restarts;

  /// What the last `retry` decision added to the counters, kept until the
  /// next attempt starts so that a retry which never happens (retry budget
  /// empty, user forced a fallback during the backoff) can be taken back.
  struct pending_retry {
    /// retry_count and total_retries were incremented.
    bool counted = false;
    /// crash_restarts was incremented.
    bool crash = false;
    /// A restart was recorded in `restarts`.
    bool restart_recorded = false;
  };
  /// Set by a `retry` decision, cleared when the next attempt starts.
  std::optional<pending_retry> pending;
};

/// The next thing the supervisor does after an attempt ended.
enum class next_step {
  /// Exit 0 and not `permanent`: the task succeeded.
  succeed,
  /// Start another attempt of the same agent after a backoff.
  retry,
  /// Move to `agent_index` in the chain and start at once.
  switch_agent,
  /// Terminal failure.
  fail,
};

/// "succeed", "retry", "switch_agent" or "fail".
std::string_view to_string(next_step x) noexcept;

/// A decision and why (the reason goes into events and the final error).
struct decision {
  next_step step = next_step::fail;
  /// For `retry`: the retry number, 1-based, for `retrying (n/max)` and the
  /// `retry_scheduled` event; the backoff index is `retry_count - 1`.
  int retry_count = 0;
  /// For `retry`: the class whose backoff schedule applies; nullopt for the
  /// restart of a `permanent` task after exit 0 (no delay).
  std::optional<error_class> backoff_class;
  /// For `switch_agent`: the chain position to move to.
  std::size_t agent_index = 0;
  /// Human-readable reason, e.g. "retries exhausted (3/3)".
  std::string reason;
};

/// The decision table of SPEC §5-§6 as a pure function of the task's state,
/// its config, the outcome and `now`. The supervisor actor only carries out
/// what this returns; every branch is unit-tested without an actor system.
///
/// Restart intensity applies to every retry of a `permanent` task, after
/// success and after failure alike (as in OTP): a retry it does not allow
/// fails the task with "restart intensity exceeded". Agent switches are not
/// counted (the chain bounds them).
class supervision_policy {
public:
  /// A policy applying `cfg`.
  explicit supervision_policy(supervisor_config cfg);

  /// A policy applying `*cfg` (not null), which may be shared with other
  /// policies: the policy never changes its settings.
  explicit supervision_policy(std::shared_ptr<const supervisor_config> cfg);

  /// The settings this policy applies.
  const supervisor_config& config() const noexcept { return *cfg_; }

  /// A fresh state for a chain of `chain_size` agents.
  supervision_state initial_state(std::size_t chain_size) const;

  /// Whether one more attempt may start (max_total_attempts). When it may,
  /// counts the attempt and returns nullopt; otherwise returns the reason the
  /// task fails with, e.g. "max_total_attempts (30) reached".
  std::optional<std::string> start_attempt(supervision_state& st) const;

  /// Judges an attempt that ended at `now_s`. `cls` is the classification
  /// of a failed outcome (nullopt when the outcome succeeded). Updates `st`
  /// (retry counts, crash restarts, switches) to match the decision.
  decision on_exit(supervision_state& st, const attempt_outcome& outcome,
                   const std::optional<classification>& cls,
                   double now_s) const;

  /// The retry budget had no token for a `retry` decision: undo the retry in
  /// `st` and decide as if the agent's retries were exhausted.
  decision on_retry_denied(supervision_state& st) const;

  /// The next agent's circuit breaker is open, or the user forced a
  /// fallback: move past the current agent (switch or fail, never retry).
  /// A retry still pending is taken back first. Ignores `enable_fallback`
  /// (the user or the breaker asked for it). `reason` becomes part of the
  /// decision's reason.
  decision skip_agent(supervision_state& st, std::string_view reason) const;

private:
  /// Switch to the next agent if fallback is enabled and one is left, else
  /// fail with `why`.
  decision fall_back(supervision_state& st, std::string why) const;

  /// Moves `st` to the next agent (the caller checked one is left).
  decision switch_to_next(supervision_state& st, std::string why) const;

  /// A `retry` of the current agent for a failure of `cls` (nullopt: the
  /// restart of a permanent task after success), or a failure when
  /// max_total_attempts or the restart intensity does not allow it.
  decision retry(supervision_state& st, std::optional<error_class> cls,
                 std::string why, double now_s) const;

  /// A failure when no further attempt may start, else nullopt.
  std::optional<decision> attempts_exhausted(const supervision_state& st,
                                             std::string_view why) const;

  /// Takes back the counters of a retry that did not happen.
  static void undo_pending(supervision_state& st);

  /// Never null.
  std::shared_ptr<const supervisor_config> cfg_;
};

} // namespace tasksup

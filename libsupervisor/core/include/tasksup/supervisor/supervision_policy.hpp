#pragma once

#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/restart_window.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// Everything the supervisor has done so far for one task: a plain record,
/// changed only by `supervision_policy::apply` and `count_attempt`.
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
  /// Retries per position in the chain (empty until the first retry).
  std::vector<int> retries_by_agent;
  /// Retries of the current agent per error class, indexed by the class
  /// (empty until the first retry; cleared with `retry_count`): each class's
  /// backoff schedule counts only its own retries.
  std::vector<int> retries_by_class;
  /// Restart times, for `permanent` tasks.
  restart_window restarts;
};

/// Retries of class `cls` by the current agent so far: the step of that
/// class's backoff schedule its next retry waits.
int retries_of(const supervision_state& st, error_class cls) noexcept;

/// Longest wait for a quota reset: a later reset time (or a garbled one)
/// waits this long and is then tried again.
inline constexpr double max_quota_wait_s = 7 * 86400.0;

/// The next thing the supervisor does after an attempt ended.
enum class next_step : std::uint8_t {
  /// Exit 0 and not `permanent`: the task succeeded.
  succeed,
  /// Start another attempt of the same agent after a backoff.
  retry,
  /// Move to `agent_index` in the chain and start at once.
  switch_agent,
  /// Terminal failure.
  fail,
  /// Park the task until its agent's quota resets (`resume_at_s`), then
  /// start the same agent again: no retry is spent.
  wait_quota,
  /// "Not now": park the task for the next step of the `not_now` schedule,
  /// then start the same agent again: no retry or restart is spent.
  wait_not_now,
};

/// "succeed", "retry", "switch_agent", "fail", "wait_quota" or
/// "wait_not_now".
std::string_view to_string(next_step x) noexcept;

/// What a decision answers.
enum class decision_cause : std::uint8_t {
  /// An attempt exited 0.
  succeeded,
  /// An attempt failed (with its classification, when it has one).
  failed,
  /// The retry budget had no token for a planned retry.
  retry_budget_exhausted,
  /// The agent's circuit breaker is open.
  breaker_open,
  /// The user forced a fallback.
  user_fallback,
  /// The agent's account is closed until its quota resets (another
  /// attempt, of this task or another, hit the limit).
  quota_closed,
};

/// Which row of the decision table applied.
enum class decision_rule : std::uint8_t {
  /// Exit 0 of a task that is not `permanent`.
  success,
  /// Retry of a failure whose action is `retry`, retries left.
  retry,
  /// Restart of a `permanent` task after exit 0.
  restart,
  /// A `temporary` task is never restarted.
  temporary_task,
  /// The class's action is `fail`.
  action_fail,
  /// The class's action is `fallback`.
  action_fallback,
  /// `max_crash_restarts` reached.
  crash_restarts_exhausted,
  /// `max_retries_per_agent` reached.
  retries_exhausted,
  /// A `fatal` failure with `fatal_scope: provider`: the agents of the
  /// provider that refused are skipped.
  fatal_provider,
  /// Moving past the agent without judging an attempt (budget, breaker,
  /// user).
  skip,
  /// A quota used up, and `on_quota` (or its default) says wait.
  quota_wait,
  /// A quota used up, and `on_quota` (or its default) says fall back.
  quota_fallback,
  /// "Not now" (class `not_now` with its default action): park and try
  /// again later, whatever the restart type.
  not_now,
};

/// What limited the step the rule asked for, if anything.
enum class decision_limit : std::uint8_t {
  /// Nothing: the rule's step was taken.
  none,
  /// A fallback was due but `enable_fallback` is off.
  fallback_disabled,
  /// A fallback was due but the chain has no next agent.
  no_agent_left,
  /// A skip was due but the chain has no next agent.
  chain_end,
  /// `max_total_attempts` reached.
  max_total_attempts,
  /// A `permanent` task's restart intensity would be exceeded.
  restart_intensity,
};

/// A decision and why, as data: the edges (events, views, CLI) turn it into
/// words with `describe`.
struct decision {
  next_step step = next_step::fail;
  decision_cause cause = decision_cause::failed;
  decision_rule rule = decision_rule::action_fail;
  decision_limit limit = decision_limit::none;
  /// For `failed`: the class judged (also when unclassified: the broadest
  /// class that matches).
  error_class cls = error_class::retryable;
  /// For `failed`: the classification, absent when none was made.
  std::optional<classification> classified;
  /// For the `*_exhausted` rules: the count reached and its maximum; for
  /// `not_now`, the not-nows in a row, this one included.
  int count = 0;
  int count_max = 0;
  /// For `retry`: the retry number, 1-based, of the current agent; for a
  /// `restart`, the agent's retries so far (0 after a stable run).
  int retry_count = 0;
  /// For `retry`: the class whose backoff schedule applies; nullopt for the
  /// restart of a `permanent` task after exit 0 (no delay).
  std::optional<error_class> backoff_class;
  /// For `switch_agent`: the chain position to move to; else the current.
  std::size_t agent_index = 0;
  /// The chain's length.
  std::size_t chain_size = 1;
  /// For `permanent` tasks: restarts within the window, this one included.
  std::size_t restarts = 0;
  /// A `permanent` or `transient` task whose attempt ran at least
  /// `intensity.reset_after_s` resets its agent's retries and backoff.
  bool reset_retries = false;
  /// For a decision on an attempt: how long it ran (a restart says so).
  double ran_s = 0;
  /// For `breaker_open`: the agent whose breaker is open; for
  /// `fatal_provider`: the provider that refused; for `quota_closed`: the
  /// account that is closed.
  std::string agent_id;
  /// For the quota rules: when the agent's account reopens; for `not_now`,
  /// when the task tries again (the scale of `at_s`).
  double resume_at_s = 0;
  /// When the decision was made (restart intensity records this time).
  double at_s = 0;
};

/// The decision in words, e.g. `retryable failure (rule "generic", line
/// "boom"): retries exhausted (3/3); switching to agent 2 of 3`.
std::string describe(const decision& d, const supervisor_config& cfg);

/// The decision table (docs/BEHAVIOUR.md, Decision table) as pure functions of
/// the task's state, its config, the outcome and `now`. Deciding changes
/// nothing: a decision is applied with `apply` when it is carried out (a retry
/// when its attempt starts), so a retry that never happens (retry budget empty,
/// user forced a fallback during the backoff) needs no undoing.
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

  /// The settings, shared.
  const std::shared_ptr<const supervisor_config>& shared_config() const {
    return cfg_;
  }

  /// A fresh state for a chain of `chain_size` agents.
  supervision_state initial_state(std::size_t chain_size) const;

  /// Whether one more attempt may start (max_total_attempts).
  bool may_start(const supervision_state& st) const noexcept;

  /// The reason the task fails with when `may_start` is false, e.g.
  /// "max_total_attempts (30) reached".
  std::string attempts_exhausted_reason() const;

  /// Counts an attempt that starts now.
  void count_attempt(supervision_state& st) const noexcept;

  /// Judges an attempt that ended at `now_s`. `cls` is the classification
  /// of a failed outcome (nullopt when it succeeded or none could be made).
  /// `providers` names each agent's provider (empty: unknown), for
  /// `fatal_scope: provider`.
  decision on_exit(const supervision_state& st, const attempt_outcome& outcome,
                   const std::optional<classification>& cls, double now_s,
                   const std::vector<std::string>& providers = {}) const;

  /// The retry budget had no token for the retry `planned`: decide as if the
  /// agent's retries were exhausted.
  decision on_retry_denied(const supervision_state& st) const;

  /// The agent's circuit breaker is open (`cause` breaker_open, `agent_id`
  /// names it), or the user forced a fallback: move past the current agent
  /// (switch or fail, never retry), ignoring `enable_fallback`.
  decision skip_agent(const supervision_state& st, decision_cause cause,
                      std::string agent_id = {}) const;

  /// A `quota_exhausted` failure was judged, or the agent's account is
  /// closed (`cause` quota_closed, `account` names it) until `resume_at_s`:
  /// wait for the reset or fall back, as `on_quota` says. No retry is
  /// counted either way.
  decision on_quota(const supervision_state& st, decision_cause cause,
                    double resume_at_s, double now_s,
                    std::string account = {}) const;

  /// Whether a used-up quota parks the task rather than falling back:
  /// `on_quota`, or by default only when no agent is left to fall back to.
  bool waits_for_quota(const supervision_state& st) const noexcept;

  /// Whether the chain has an agent after the current one.
  bool has_next_agent(const supervision_state& st) const noexcept {
    return st.agent_index + 1 < st.chain_size;
  }

  /// Carries out `d` on `st`: a switch moves to the next agent, a retry
  /// counts itself (and, for permanent tasks, records its restart at
  /// `d.at_s`). Succeed and fail change nothing.
  void apply(supervision_state& st, const decision& d) const;

private:
  /// Switch to the next agent if fallback is enabled and one is left, else
  /// fail.
  decision fall_back(const supervision_state& st, decision d) const;

  /// Moves to the next agent (the caller checked one is left).
  decision switch_to_next(const supervision_state& st, decision d) const;

  /// A retry of the current agent (`restart` rule when `d.rule` says so),
  /// or a failure when max_total_attempts or the restart intensity does not
  /// allow it.
  decision retry(const supervision_state& st, decision d,
                 std::optional<error_class> cls) const;

  /// A decision of `cause` for `st`, step and rule still to be set.
  decision make(const supervision_state& st, decision_cause cause,
                double now_s) const;

  /// Never null.
  std::shared_ptr<const supervisor_config> cfg_;
};

} // namespace tasksup

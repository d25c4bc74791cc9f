#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tasksup {

/// What kind of failure an attempt ended in (docs/BEHAVIOUR.md, Failure
/// classes). Each value documents whether and how to recover; `default_action`
/// is that table as code.
enum class error_class : uint8_t {
  /// OOM-killed, SIGKILL (exit 137) or a crash signal: retry in a clean
  /// container, at most `max_crash_restarts` times per task.
  container_crash,
  /// API rate limit or quota: retry with the long backoff (or the hint).
  rate_limit,
  /// Authentication, invalid key, permission: fail now, no retry, no fallback.
  fatal,
  /// The agent is not installed or not executable: fall back at once.
  agent_failure,
  /// Any other non-zero exit, assumed transient: retry with standard backoff.
  retryable,
  /// The runtime could not start or watch the attempt (engine unreachable,
  /// spawn failed, worker died): retry with standard backoff.
  infrastructure,
  /// The attempt exited 0 but one of the task's gates (its tests, a linter)
  /// failed in the attempt's worktree: retry with standard backoff (the next
  /// attempt is told why), then fall back. Never produced by output rules.
  gate_failed,
  /// The attempt ran longer than `attempt_timeout_s` and was stopped: retry
  /// with standard backoff.
  timeout,
  /// The task's `preflight` command refused the attempt (non-zero exit,
  /// timeout), so the agent never ran: retry with standard backoff.
  preflight_failed,
  /// A usage or plan limit that resets at a known time ("usage limit
  /// reached, resets at 3pm", "exhausted your daily quota"): the agent's
  /// account is closed until then. The task waits for the reset or falls
  /// back at once (`on_quota`); retries are not spent either way.
  quota_exhausted,
  /// The agent stopped to wait for a person: it asked a question and read a
  /// closed stdin, asked for approval, or needs an interactive login. Running
  /// it again asks again: fall back at once, never retried in a loop.
  needs_input,
  /// "Not now": the task's preflight exited `not_now_exit_code` (75,
  /// EX_TEMPFAIL), or a rule says the agent could not work for want of
  /// something that comes back (a busy GPU, a full disk being cleaned).
  /// Nothing is wrong with the task or its agent: it parks and tries again
  /// on the `not_now` schedule, spending no retry and no restart.
  not_now,
  /// The attempt exited 0 but its answer was missing, not JSON, or did not
  /// match the task's answer schema (its own `answer_schema`, or its
  /// role's): retry with standard backoff (the next attempt is told the
  /// schema errors), then fall back. Never produced by output rules.
  invalid_output,
};

/// Every class, in the declaration order above.
inline constexpr std::array<error_class, 13> all_error_classes{
  error_class::container_crash,
  error_class::rate_limit,
  error_class::fatal,
  error_class::agent_failure,
  error_class::retryable,
  error_class::infrastructure,
  error_class::gate_failed,
  error_class::timeout,
  error_class::preflight_failed,
  error_class::quota_exhausted,
  error_class::needs_input,
  error_class::not_now,
  error_class::invalid_output,
};

/// The snake_case name used in config files and events.
std::string_view to_string(error_class x) noexcept;

/// Parses the snake_case name; nullopt for anything else.
std::optional<error_class> parse_error_class(std::string_view str) noexcept;

/// What the supervisor does with a failure of a given class.
enum class action : uint8_t {
  /// Retry the same agent (after backoff) while it has retries left.
  retry,
  /// Abandon the current agent and move to the next one in the chain.
  fallback,
  /// Terminal failure: no retry, no fallback.
  fail,
};

/// "retry", "fallback" or "fail".
std::string_view to_string(action x) noexcept;

/// Parses "retry", "fallback" or "fail"; nullopt for anything else.
std::optional<action> parse_action(std::string_view str) noexcept;

/// The default action per class: fatal -> fail; agent_failure,
/// quota_exhausted and needs_input -> fallback; everything else -> retry.
/// (A task's `on_quota: wait` parks on a quota instead; see task_spec. The
/// retry of `not_now` parks the task without spending a retry.)
action default_action(error_class x) noexcept;

} // namespace tasksup

#pragma once

// The task model every layer shares: how a task stops, where it is, how it
// ended and why, what `status` and `await` report, one event's head, and the
// node's shared-health figures. Plain values with no CAF in them, so a
// program that only shows them (the thin `tasksup` front) needs no actor
// system; tasksup/actors/protocol.hpp carries them over the network with
// their `inspect` overloads.

#include "tasksup/supervisor/agent_output.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/group_machine.hpp"
#include "tasksup/supervisor/outcome.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

// -- enums
// ---------------------------------------------------------------------

/// How a user stops a task (docs/BEHAVIOUR.md, Stop, kill and other controls).
enum class stop_mode : std::uint8_t {
  /// Graceful: SIGTERM / `docker stop`, then kill after the grace period.
  cancel,
  /// Force-kill at once.
  kill,
};

/// "cancel" or "kill".
std::string_view to_string(stop_mode x) noexcept;

/// Parses "cancel" or "kill".
std::optional<stop_mode> parse_stop_mode(std::string_view str) noexcept;

/// Where a task is in its life.
enum class task_state : std::uint8_t {
  /// Waiting for an attempt slot (max_concurrent).
  queued,
  /// An attempt is running (or its exit is being judged).
  running,
  /// Waiting out a backoff delay before the next attempt.
  backoff,
  /// Finished; the result is final.
  done,
  /// Paused by the user: no attempt starts until it is resumed.
  paused,
  /// Waiting for its agent's usage quota to reset (`task_status::resume_at`).
  quota_wait,
  /// Its preflight said "not now": waiting to try again
  /// (`task_status::resume_at`), spending no retry.
  not_now,
};

/// Every task state, in declaration order.
inline constexpr std::array<task_state, 7> all_task_states = {
  task_state::queued, task_state::running, task_state::backoff,
  task_state::done,   task_state::paused,  task_state::quota_wait,
  task_state::not_now};

/// "queued", "running", "backoff", "done", "paused", "quota_wait" or
/// "not_now".
std::string_view to_string(task_state x) noexcept;

/// How a task ended (`task_done.outcome`; docs/BEHAVIOUR.md, Result).
enum class task_outcome : std::uint8_t { succeeded, failed, stopped };

/// Every task outcome, in declaration order.
inline constexpr std::array<task_outcome, 3> all_task_outcomes = {
  task_outcome::succeeded, task_outcome::failed, task_outcome::stopped};

/// "succeeded", "failed" or "stopped".
std::string_view to_string(task_outcome x) noexcept;

/// Every event kind (docs/BEHAVIOUR.md, Events).
enum class event_kind : std::uint8_t {
  task_submitted,
  attempt_started,
  log,
  attempt_exited,
  classified,
  retry_scheduled,
  agent_switched,
  user_stop,
  task_done,
  escalated,
  warning,
  /// A step around an attempt: preflight, gate, delivery, worktree,
  /// attempt timeout, voluntary end, restart backoff.
  step,
  /// A change in a group (its start, a member's start or end, a restart
  /// decision, its end), under the group's id.
  group,
};

/// The event's JSON name, e.g. "attempt_started".
std::string_view to_string(event_kind x) noexcept;

// -- values
// --------------------------------------------------------------------

/// The `metadata` of a result (docs/BEHAVIOUR.md, Result).
struct result_metadata {
  /// The command of the last agent that ran.
  std::string agent_used;
  /// The id of the last agent that ran.
  std::string agent_id;
  /// Retries of the last agent.
  int retry_count = 0;
  int total_attempts = 0;
  int fallback_count = 0;
  /// Retries over the whole task, and per agent id (agents with none are
  /// left out).
  int total_retries = 0;
  std::map<std::string, int> retries_by_agent;
  /// Tokens summed over the task's attempts that reported usage (each
  /// attempt's own is in its outcome's `structured`); absent when none did.
  std::optional<token_usage> usage;
  /// US dollars summed over the attempts that reported a cost; absent when
  /// none did.
  std::optional<double> cost_usd;
};

/// Why a task ended as it did (`task_cause::reason`).
enum class end_reason : std::uint8_t {
  /// Not known: a result from a journal written before results said why.
  unknown,
  /// The policy judged an attempt a success.
  succeeded,
  /// The policy gave up: retries or restarts exhausted, a fatal or
  /// `action: fail` class, a temporary task, no agent left
  /// (`task_cause::last_class` is the last failure's class).
  policy_failed,
  /// `max_total_attempts` reached.
  attempts_exhausted,
  /// Stopped by the user.
  user_stop,
  /// `deadline_s` passed.
  deadline,
  /// A request the task depended on failed.
  request_failed,
  /// The runtime refused to start the attempt (e.g. a missing image).
  start_refused,
  /// The agent said it was done (`done_exit_code` or the done file).
  voluntary,
  /// The gates passed but the change could not be delivered.
  delivery_failed,
  /// The policy gave up after the last attempt was lost with its worker
  /// node (`task_cause::node`).
  node_lost,
  /// The task's supervisor died.
  supervisor_died,
  /// The node restarted without the runtime the task's attempt used.
  runtime_missing,
};

/// The name of an end reason, e.g. "node_lost".
std::string_view to_string(end_reason x) noexcept;

/// Why a task ended, as data: what a program branches on. The words a user
/// reads are `task_result::error`, rendered once where the task ended (they
/// name the policy's counts and settings of that moment).
struct task_cause {
  end_reason reason = end_reason::unknown;
  /// The class of the last classified failure, when one was classified.
  std::optional<error_class> last_class;
  /// For `node_lost`: the worker node the last attempt was lost with.
  std::string node;
};

/// A task's final result, escalated to its parent (docs/BEHAVIOUR.md,
/// Result).
struct task_result {
  std::string task_id;
  task_outcome outcome = task_outcome::failed;
  /// The last attempt's exit code (-1 when no attempt ran).
  int exit_code = -1;
  /// Why it failed or stopped, in words; absent on success.
  std::optional<std::string> error;
  /// Why it ended, as data.
  task_cause cause;
  std::vector<std::string> artifacts;
  result_metadata metadata;
  /// The checked answer of the attempt that succeeded, compact JSON; empty
  /// when the task asks for none.
  std::string answer;
};

/// A task as `status` reports it.
struct task_status {
  std::string task_id;
  std::string environment;
  task_state state = task_state::queued;
  /// The agent of the current (or last) attempt.
  std::string agent_id;
  /// The current (or last) attempt number, 0 before the first.
  int attempt = 0;
  /// Retries of the current agent, for `retrying (n/max)`.
  int retry_count = 0;
  int max_retries = 0;
  int total_attempts = 0;
  int fallback_count = 0;
  /// The trace id of the task's events.
  std::string trace_id;
  /// The final result once `state` is done.
  std::optional<task_result> result;
  /// The worker node of the running attempt; empty on this node.
  std::string node;
  /// Why a queued task waits (no fitting worker node, all busy), or what a
  /// parked one waits for; empty when it is simply next in line.
  std::string waiting_for;
  /// For `quota_wait`: when the agent's quota resets (seconds since the
  /// Unix epoch); 0 otherwise.
  double resume_at = 0;
  /// For a group: the group and its members, the tree in start order
  /// (empty for a task).
  std::vector<group_row> tree;
};

/// The typed keys of one event (defined in events.hpp).
struct event_fields;

/// What one event says beyond the fields below, shared by every copy of
/// the event (events.cpp): its trace and span ids, its kind's keys typed,
/// and its JSON line, rendered once, by whichever consumer first asks for
/// it (the journal, a remote subscriber, a history read). A supervisor only
/// stores values: rendering is the consumers' cost, and events nobody
/// renders (output lines past the history's budget, a benchmark's) cost
/// nothing to render.
class event_body;

/// One event: the fields a consumer filters on, plus the body that renders
/// the JSON line with exactly its kind's keys. The JSON is rendered from the
/// head of whichever copy asks first: an event is not changed once made.
struct event {
  event_kind kind = event_kind::warning;
  std::string task_id;
  int attempt = 0;
  /// Seconds since the Unix epoch.
  double ts = 0;
  /// Null only in a default-constructed event (whose JSON is empty).
  std::shared_ptr<const event_body> body;

  /// One JSON object, no trailing newline (rendered on first use; safe to
  /// call from any thread).
  const std::string& json() const;

  /// The same keys as typed values (events.hpp), for consumers in this
  /// process that would otherwise parse the JSON back (the human view of
  /// `tasksup run`, the node's figures). Null for an event read back from
  /// JSON (journal, other nodes): there the JSON is the event.
  const event_fields* fields() const noexcept;

  /// 32 lowercase hex digits, one per task.
  std::string_view trace_id() const noexcept;

  /// 16 lowercase hex digits, one per attempt (the task's own span before
  /// the first attempt).
  std::string_view span_id() const noexcept;
};

/// The body of an event that arrives as its JSON line (journal, another
/// node): no typed keys.
std::shared_ptr<const event_body> json_event_body(std::string_view trace_id,
                                                  std::string_view span_id,
                                                  std::string json);

/// A worker's report of its attempt's end.
struct attempt_report {
  int attempt = 0;
  attempt_outcome outcome;
  /// Container id or pid, as the runtime named it.
  std::string container_id;
  /// The answer found in the attempt's output (at most
  /// `max_answer_bytes`), unchecked; the supervisor checks it.
  std::optional<std::string> answer;
};

/// An account closed for a used-up quota, as `(health)` reports it.
struct account_quota {
  std::string account;
  /// When it reopens (seconds since the Unix epoch).
  double reset_at = 0;
};

/// One agent's circuit breaker, as `(health)` reports it.
struct agent_breaker {
  std::string agent_id;
  breaker_state state = breaker_state::closed;
};

/// The registry's shared-health figures at one moment.
struct node_health {
  /// Every agent with breaker state (agents unused for long are dropped).
  std::vector<agent_breaker> breakers;
  /// The retry budget has a capacity (else it is unlimited).
  bool budget_limited = false;
  double budget_tokens = 0;
  double budget_capacity = 0;
  /// Attempt slots held, the limit, and tasks waiting for one.
  int slots_in_use = 0;
  int slot_limit = 0;
  int queued = 0;
  /// The accounts closed until their quota resets.
  std::vector<account_quota> quotas;
};

} // namespace tasksup

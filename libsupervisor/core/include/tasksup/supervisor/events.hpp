#pragma once

// Builders for the events: one function per kind with that kind's
// fixed keys. Each returns an `event` that holds the kind's keys as typed
// values (`event_fields`) and renders, when first asked (`event::json`),
// one JSON object with `event`, `task_id`, `attempt`, `trace_id`, `span_id`,
// `ts` and the kind's keys. Every string is checked as the event is built:
// invalid UTF-8 (agent output is untrusted) is replaced by U+FFFD, so the
// typed values and the JSON say the same; control characters are escaped
// by the serializer. The timestamp comes from the caller (the actors read
// the clock: tasksup/actors/events.hpp, `wall_clock_s`).

#include "tasksup/supervisor/backoff.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/json_writer.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/task_model.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tasksup {

/// Trace and span ids with W3C trace-context sizes, from a seeded generator
/// (one per node, so a seed reproduces a run's ids).
class trace_id_generator {
public:
  explicit trace_id_generator(std::uint64_t seed);

  /// 32 lowercase hex digits, never all zero.
  std::string trace_id();

  /// 16 lowercase hex digits, never all zero.
  std::string span_id();

  /// A seed for a child generator (a task supervisor's span ids).
  std::uint64_t child_seed();

  /// The next 64 random bits (SplitMix64: 8 bytes of state, where an
  /// mt19937_64 would add 2.5 KB to every task supervisor).
  std::uint64_t next();

private:
  std::uint64_t state_;
};

/// The fields every event of one task attempt shares. The strings are views:
/// they must outlive the builder call (the event copies what it keeps), so a
/// supervisor stamps events from its own state without copying it first.
/// The trace and span ids are kept in the event without allocating when they
/// have their W3C sizes (32 and 16 digits).
struct event_head {
  std::string_view task_id;
  int attempt = 0;
  std::string_view trace_id;
  std::string_view span_id;
  /// Seconds since the Unix epoch.
  double ts = 0;
};

/// The kind's own keys of an event, typed, one struct per kind named as in
/// docs/BEHAVIOUR.md, Events. Strings are the text the JSON carries (invalid
/// UTF-8 already replaced by U+FFFD), so a view reads the same from either.
namespace event_data {

struct task_submitted {
  std::string environment;
  std::vector<std::string> agents;
};

struct attempt_started {
  std::string agent_id;
  std::string agent_cli;
  std::string container_id;
  /// The task's state directory (TASKSUP_MEMBER_STATE) on the host that
  /// runs the attempt; empty for none.
  std::string member_state;
};

struct log {
  std::string stream;
  std::string line;
};

struct attempt_exited {
  int exit_code = 0;
  int signal = 0;
  bool oom_killed = false;
  double duration_s = 0;
  /// Empty when the runtime did not fail (the JSON then has no key).
  std::string infrastructure_error;
  /// False when nothing ran (the JSON then says `"started":false`).
  bool started = true;
  std::optional<token_usage> usage;
  std::optional<double> cost_usd;
};

struct classified {
  classification c;
};

struct retry_scheduled {
  int retry_count = 0;
  int max_retries = 0;
  std::string agent;
  delay_decision delay;
  std::string reason;
  /// For the restart of a `permanent` task after exit 0: its restart
  /// number within the intensity window (1 for the first); 0 for a retry.
  int restart = 0;
  /// How long the attempt before it ran, and whether that was a stable run
  /// (`intensity.reset_after_s`: its retries and backoff start over).
  double ran_s = 0;
  bool stable = false;
};

struct agent_switched {
  std::string from;
  std::string to;
  std::string reason;
  /// Why the agent was left: "failure" (its attempts failed),
  /// "retry_budget", "breaker_open" or "user" (a forced fallback).
  std::string cause;
};

struct user_stop {
  stop_mode mode = stop_mode::cancel;
  std::string message;
};

struct task_done {
  /// Held out of line: the largest kind's keys would otherwise set the room
  /// of every event's body (~170 bytes more each, in every task's history).
  std::shared_ptr<const task_result> held;

  const task_result& result() const { return *held; }
};

struct escalated {
  task_outcome outcome = task_outcome::failed;
  std::string parent;
};

struct warning {
  std::string message;
};

struct step {
  std::string step;
  std::string name;
  bool passed = false;
  std::optional<int> exit_code;
  std::string message;
};

struct group {
  /// "started" (every member started once), "member_started",
  /// "member_ended", "restart" (a restart decision) or "ended".
  std::string change;
  /// The member it is about (for "restart": whose end caused it; for
  /// "ended": the member that ended the group, if one did).
  std::string member;
  /// "member_ended" and "restart": how the member's run ended ("normal",
  /// "failed", "stopped"); "ended": why the group ended ("completed",
  /// "auto_shutdown", "intensity", "stopped", "start_failed").
  std::string how;
  /// "restart": the members it stops and starts again, in start order.
  std::vector<std::string> members;
  /// The group's restart decisions so far.
  std::uint64_t restarts = 0;
  /// "ended": how the end counts for the group above it, or as a result
  /// ("succeeded", "failed", "stopped"); empty otherwise.
  std::string outcome;
};

} // namespace event_data

/// An event's keys beyond its head (`event` holds those), as the builders
/// below made them and `event::json` renders them.
struct event_fields {
  std::variant<event_data::task_submitted, event_data::attempt_started,
               event_data::log, event_data::attempt_exited,
               event_data::classified, event_data::retry_scheduled,
               event_data::agent_switched, event_data::user_stop,
               event_data::task_done, event_data::escalated,
               event_data::warning, event_data::step, event_data::group>
    data;
};

/// `task_submitted`: adds `environment` and the agent chain `agents` (ids).
event task_submitted_event(const event_head& h, std::string_view environment,
                           const std::vector<std::string>& agents);

/// `attempt_started`: `agent_id`, `agent_cli`, `container_id`, and
/// `member_state` (the task's state directory on the host that runs the
/// attempt) when it has one.
event attempt_started_event(const event_head& h, std::string_view agent_id,
                            std::string_view agent_cli,
                            std::string_view container_id,
                            std::string_view member_state = {});

/// `log`: one output `line` of the attempt and its `stream` ("stdout",
/// "stderr", or "tasksup" for the runtime's notes on held-back output).
event log_event(const event_head& h, std::string_view line,
                std::string_view stream = "stdout");

/// `attempt_exited`: `exit_code`, `signal`, `oom_killed`, `duration_s`
/// (plus `infrastructure_error` when the runtime failed, and this attempt's
/// `usage` {`input_tokens`, `output_tokens`, `cached_input_tokens`} and
/// `cost_usd` when its CLI's structured output reported them).
event attempt_exited_event(const event_head& h, const attempt_outcome& out);

/// `classified`: `class`, `rule`, `line`, `retry_after_s` (null if none).
event classified_event(const event_head& h, const classification& c);

/// `retry_scheduled`: `retry_count`, `agent`, `delay_s` (plus `max_retries`
/// for the `retrying (n/max)` view) and where the delay came from:
/// `delay_source`
/// ("schedule", "jitter" or "retry_after_hint"), `scheduled_s` (the
/// schedule's step before jitter, hint and cap), `capped`, the decision's
/// `reason` and `restart` (a permanent task's restart number after exit 0,
/// 0 for a retry), `ran_s` (how long the attempt before ran) and `stable`
/// (it ran `reset_after_s`: retries and backoff start over).
event retry_scheduled_event(const event_head& h, int retry_count,
                            int max_retries, std::string_view agent,
                            const delay_decision& delay,
                            std::string_view reason, int restart = 0,
                            double ran_s = 0, bool stable = false);

/// `agent_switched`: `from`, `to` (plus the decision's `reason` and its
/// `cause`: "failure", "retry_budget", "breaker_open" or "user").
event agent_switched_event(const event_head& h, std::string_view from,
                           std::string_view to, std::string_view reason,
                           std::string_view cause = "failure");

/// `user_stop`: `mode` (plus a human `message`, e.g. `user_cancel
/// requested` or `retry skipped due to user stop`).
event user_stop_event(const event_head& h, stop_mode mode,
                      std::string_view message);

/// `task_done`: `outcome`, `exit_code`, `error`, `artifacts`, `metadata`.
event task_done_event(const event_head& h, const task_result& r);

/// `escalated`: `outcome` and `parent` (the receiving actor's id).
event escalated_event(const event_head& h, task_outcome outcome,
                      std::string_view parent);

/// `warning`: a problem that did not stop the task (`message`).
event warning_event(const event_head& h, std::string_view message);

/// `step`: a step around an attempt: `step` ("preflight", "gate",
/// "deliver", "worktree", "attempt_timeout", "voluntary_end"), `name`,
/// `passed`, `exit_code` (null when none) and a human `message`.
event step_event(const event_head& h, std::string_view step,
                 std::string_view name, bool passed,
                 std::optional<int> exit_code, std::string_view message);

/// `group`: a change in a group, under the group's id: `change`, `member`,
/// `how`, `members`, `restarts` and `outcome` (see event_data::group).
event group_event(const event_head& h, std::string_view change,
                  std::string_view member, std::string_view how,
                  const std::vector<std::string>& members,
                  std::uint64_t restarts, std::string_view outcome = {});

/// The result as the JSON object `task_done` carries (without `event` keys),
/// serialized; for `tasksup run` and status output.
std::string result_to_json(const task_result& r);

/// Writes the result's keys as `task_done` carries them (`outcome`,
/// `exit_code`, `error`, `artifacts`, `metadata`) into the object `w` has
/// open.
void write_result_fields(json_writer& w, const task_result& r);

} // namespace tasksup

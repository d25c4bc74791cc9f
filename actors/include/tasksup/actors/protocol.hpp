#pragma once

// Every message and atom the tasksup actors exchange, in one place, and the
// one call that registers them with an actor system config. Each type has an
// `inspect` overload so the same messages can cross the network unchanged.
// The task model they carry (task_status, task_result, event, ...) is the
// core's, tasksup/supervisor/task_model.hpp.

#include "tasksup/actors/atoms.hpp"
#include "tasksup/actors/inspect.hpp"
#include "tasksup/actors/interfaces.hpp"

#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/group_spec.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_model.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tasksup {

// -- messages
// ------------------------------------------------------------------

/// Asks the classifier to judge a failed outcome.
struct classify_request {
  /// Selects the task's own rules when it has some.
  std::string task_id;
  attempt_outcome outcome;
  std::string agent_cli;
};

/// Asks the backoff actor for the delay of one retry: the schedule of the
/// retry's class (chosen by the task machine) and where the task is on it.
struct delay_request {
  backoff_spec spec;
  /// 0 for the first retry of the agent.
  int retry_index = 0;
  /// The task's previous delay (decorrelated jitter), 0 for none.
  double previous_s = 0;
  /// A retry-after hint, only from a rate-limit classification.
  std::optional<double> hint_s;
};

/// Asks the registry to start an attempt of `agent_id`.
struct permit_request {
  std::string task_id;
  std::string agent_id;
  /// The account whose quota the agent spends (`agent_spec::account`,
  /// else the agent id).
  std::string account;
  /// The task holds no slot yet: queue for one.
  bool need_slot = true;
  /// The attempt is a retry: take a token from the retry budget.
  bool need_token = false;
  /// What the attempt needs from a worker node (runtime, labels).
  placement_request placement;
  /// The attempt runs on the coordinator itself whatever nodes joined (a
  /// repository task: its worktrees, gates and delivery are here).
  bool local_only = false;
};

/// The registry's answer, sent once the task holds a slot.
struct permit_reply {
  /// The agent's circuit breaker lets the attempt through.
  bool agent_allowed = true;
  /// A retry token was granted (true when none was asked for).
  bool token = true;
  /// The worker node the slot is on, empty for this node.
  std::string node;
  /// That node's agent, which starts the attempt there.
  node_agent_actor agent;
  /// The runtime the attempt uses there.
  std::string runtime;
  /// Non-zero when the agent's account is closed for a used-up quota: when
  /// it reopens (the node's clock). Such a reply holds no new slot.
  double quota_reset_at = 0;
};

// -- errors
// --------------------------------------------------------------------

/// A control request a node's own front end (the local control socket, the
/// dashboard) makes of the door on a client's behalf (`as_client_atom`).
enum class task_control : std::uint8_t {
  stop,
  kill,
  retry_now,
  fallback_now,
  forget,
  pause,
  resume,
};

/// The action's name in the control API and the audit log: "stop", "kill",
/// "retry-now", "fallback-now", "forget", "pause", "resume".
std::string_view to_string(task_control x) noexcept;

/// The action called `name` (see `to_string`), or nullopt.
std::optional<task_control> task_control_named(std::string_view name);

/// One control request: what to do, to which task.
struct control_request {
  task_control action = task_control::stop;
  std::string task_id;
};

/// Error codes of the `tasksup` error category, carried in caf::error with a
/// text context that says what was wrong.
enum class protocol_error : std::uint8_t {
  /// The task was rejected by validation (the context names field and file).
  invalid_task = 1,
  /// A task with this id is known already.
  duplicate_task,
  /// No task with this id.
  unknown_task,
  /// The task names a runtime this node does not have.
  unknown_runtime,
  /// Classifier rules did not compile.
  invalid_rules,
  /// The journal could not record the request (e.g. a full disk).
  journal_failed,
  /// A limit on what a client may leave pending at the node was reached
  /// (the context names it and its value): retry once earlier requests
  /// were answered.
  limit_reached,
  /// An `await` was not answered within the node's await timeout: the
  /// task is still running; await it again to keep waiting.
  await_timeout,
  /// This coordinator stands by: another one leads the shared journal (the
  /// context names it and where to reach it).
  not_leader,
};

/// The name of a protocol error code.
std::string_view to_string(protocol_error x) noexcept;

/// The error category atom of `protocol_error`.
inline constexpr caf::atom_value protocol_error_category = caf::atom("tasksup");

/// Makes a caf::error of the tasksup category with `what` as its context.
caf::error make_error(protocol_error code, std::string what);

/// The context text of an error made by `make_error` (or CAF's rendering of
/// any other error).
std::string error_text(const caf::error& err);

/// Whether `err` is the protocol error `code` (made by `make_error`).
inline bool is_error(const caf::error& err, protocol_error code) noexcept {
  return err.category() == protocol_error_category &&
         err.code() == static_cast<std::uint8_t>(code);
}

// -- inspect
// -------------------------------------------------------------------

namespace detail {

template<>
struct enum_size<stop_mode> : std::integral_constant<std::size_t, 2> {};

template<>
struct enum_size<task_state> : std::integral_constant<std::size_t, 7> {};

template<>
struct enum_size<task_outcome>
  : std::integral_constant<std::size_t, all_task_outcomes.size()> {};

template<>
struct enum_size<event_kind> : std::integral_constant<std::size_t, 13> {};

template<>
struct enum_size<member_phase> : std::integral_constant<std::size_t, 7> {};

template<>
struct enum_size<member_end> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<group_strategy> : std::integral_constant<std::size_t, 5> {};

template<>
struct enum_size<end_reason> : std::integral_constant<std::size_t, 13> {};

template<>
struct enum_size<breaker_state> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<task_control> : std::integral_constant<std::size_t, 7> {};

} // namespace detail

/// Serializes result metadata.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, result_metadata& x) {
  return f(caf::meta::type_name("result_metadata"), x.agent_used, x.agent_id,
           x.retry_count, x.total_attempts, x.fallback_count, x.total_retries,
           detail::bounded(x.retries_by_agent, "metadata.retries_by_agent"),
           detail::opt(x.usage),
           detail::finite(x.cost_usd, "metadata.cost_usd"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.agent_used, wire::max_text_bytes, "metadata.agent_used"},
                {x.agent_id, wire::max_id_bytes, "metadata.agent_id"}});
           }));
}

/// Serializes why a task ended.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_cause& x) {
  return f(caf::meta::type_name("task_cause"),
           detail::checked(x.reason, "result.cause.reason"),
           detail::opt_checked(x.last_class, "result.cause.last_class"), x.node,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.node, wire::max_id_bytes, "result.cause.node"}});
           }));
}

namespace detail {

/// The size bounds of a result's text, checked once it is read (the wire's
/// form and older journals' alike).
inline caf::error check_result_sizes(const task_result& x) {
  return check_sizes(
    {{x.task_id, wire::max_id_bytes, "result.task_id"},
     {x.error ? *x.error : x.task_id, wire::max_text_bytes, "result.error"},
     {x.answer, max_answer_bytes, "result.answer"}});
}

/// The size bounds of a status record's text, checked once it is read.
inline caf::error check_status_sizes(const task_status& x) {
  return check_sizes(
    {{x.task_id, wire::max_id_bytes, "status.task_id"},
     {x.node, wire::max_id_bytes, "status.node"},
     {x.waiting_for, wire::max_text_bytes, "status.waiting_for"},
     {x.environment, wire::max_id_bytes, "status.environment"},
     {x.agent_id, wire::max_id_bytes, "status.agent_id"},
     {x.trace_id, wire::max_id_bytes, "status.trace_id"}});
}

} // namespace detail

namespace detail {

/// A result's fields up to its metadata, then `more` (the journal reads
/// older results, which had fewer, with the same list).
template<class Inspector, class... More>
typename Inspector::result_type inspect_result(Inspector& f, task_result& x,
                                               More&&... more) {
  return f(caf::meta::type_name("task_result"), x.task_id,
           checked(x.outcome, "result.outcome"), x.exit_code, opt(x.error),
           bounded(x.artifacts, "result.artifacts"), x.metadata,
           std::forward<More>(more)...,
           caf::meta::load_callback([&] { return check_result_sizes(x); }));
}

} // namespace detail

/// Serializes a task result.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_result& x) {
  return detail::inspect_result(f, x, x.cause, x.answer);
}

/// Serializes one row of a group's tree.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_row& x) {
  return f(
    caf::meta::type_name("group_row"), x.depth, x.id, x.group,
    detail::checked(x.restart, "group_row.restart"), x.significant,
    detail::checked(x.phase, "group_row.phase"),
    detail::opt_checked(x.last, "group_row.last"), x.restarts,
    detail::checked(x.strategy, "group_row.strategy"),
    detail::bounded(x.depends_on, "group_row.depends_on"),
    caf::meta::load_callback([&]() -> caf::error {
      if (x.depth < 0 || x.depth > static_cast<int>(max_group_depth))
        return detail::wire_error("group_row.depth", "out of range");
      for (auto& d : x.depends_on)
        if (auto err = detail::check_sizes(
              {{d, wire::max_id_bytes, "group_row.depends_on"}}))
          return err;
      return detail::check_sizes({{x.id, wire::max_id_bytes, "group_row.id"}});
    }));
}

namespace detail {

/// A status record's fields, its result read through `result` (the
/// journal reads older results through a view of its own), with `more`
/// after them: the wire's and the journal's forms in one place.
template<class Inspector, class Result, class... More>
typename Inspector::result_type
inspect_status(Inspector& f, task_status& x, Result&& result, More&&... more) {
  return f(caf::meta::type_name("task_status"), x.task_id, x.environment,
           checked(x.state, "status.state"), x.agent_id, x.attempt,
           x.retry_count, x.max_retries, x.total_attempts, x.fallback_count,
           x.trace_id, std::forward<Result>(result), x.node, x.waiting_for,
           finite(x.resume_at, "status.resume_at"), std::forward<More>(more)...,
           caf::meta::load_callback([&] { return check_status_sizes(x); }));
}

} // namespace detail

/// Serializes a status record (as a node answers `status`; the journal
/// keeps it without `tree`, see journal_codec.cpp).
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_status& x) {
  return detail::inspect_status(f, x, detail::opt(x.result),
                                detail::bounded(x.tree, "status.tree"));
}

/// Serializes an event: its JSON line travels, rendered by the sender; the
/// receiver's copy has no typed keys.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, event& x) {
  if constexpr (Inspector::reads_state) {
    std::string trace_id{x.trace_id()};
    std::string span_id{x.span_id()};
    std::string json = x.json();
    return f(caf::meta::type_name("event"),
             detail::checked(x.kind, "event.kind"), x.task_id, x.attempt,
             trace_id, span_id, detail::finite(x.ts, "event.ts"), json);
  } else {
    std::string trace_id;
    std::string span_id;
    std::string json;
    return f(caf::meta::type_name("event"),
             detail::checked(x.kind, "event.kind"), x.task_id, x.attempt,
             trace_id, span_id, detail::finite(x.ts, "event.ts"), json,
             caf::meta::load_callback([&]() -> caf::error {
               if (auto err = detail::check_sizes(
                     {{x.task_id, wire::max_id_bytes, "event.task_id"},
                      {trace_id, wire::max_id_bytes, "event.trace_id"},
                      {span_id, wire::max_id_bytes, "event.span_id"},
                      {json, 4 * wire::max_text_bytes, "event.json"}}))
                 return err;
               x.body = json_event_body(trace_id, span_id, std::move(json));
               return caf::none;
             }));
  }
}

/// Serializes an attempt report.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_report& x) {
  return f(
    caf::meta::type_name("attempt_report"), x.attempt, x.outcome,
    x.container_id, detail::opt(x.answer),
    caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.container_id, wire::max_text_bytes, "attempt_report.container_id"},
         {x.answer ? *x.answer : x.container_id, max_answer_bytes,
          "attempt_report.answer"}});
    }));
}

/// Serializes a classify request.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classify_request& x) {
  return f(
    caf::meta::type_name("classify_request"), x.task_id, x.outcome, x.agent_cli,
    caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.task_id, wire::max_id_bytes, "classify_request.task_id"},
         {x.agent_cli, wire::max_text_bytes, "classify_request.agent_cli"}});
    }));
}

/// Serializes a delay request.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, delay_request& x) {
  return f(caf::meta::type_name("delay_request"), x.spec, x.retry_index,
           detail::finite(x.previous_s, "delay_request.previous_s"),
           detail::finite(x.hint_s, "delay_request.hint_s"));
}

/// Serializes a computed delay.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, delay_decision& x) {
  return f(caf::meta::type_name("delay_decision"),
           detail::finite(x.delay_s, "delay_decision.delay_s"),
           detail::checked(x.source, "delay_decision.source"),
           detail::finite(x.scheduled_s, "delay_decision.scheduled_s"), x.step,
           x.capped);
}

/// Serializes a control request.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, control_request& x) {
  return f(caf::meta::type_name("control_request"),
           detail::checked(x.action, "control_request.action"), x.task_id,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.task_id, wire::max_id_bytes, "control_request.task_id"}});
           }));
}

/// Serializes a permit request.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, permit_request& x) {
  return f(
    caf::meta::type_name("permit_request"), x.task_id, x.agent_id, x.account,
    x.need_slot, x.need_token, x.placement.runtime,
    detail::bounded(x.placement.labels, "permit_request.labels"), x.local_only,
    caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.task_id, wire::max_id_bytes, "permit_request.task_id"},
         {x.placement.runtime, wire::max_id_bytes, "permit_request.runtime"},
         {x.agent_id, wire::max_id_bytes, "permit_request.agent_id"},
         {x.account, wire::max_id_bytes, "permit_request.account"}});
    }));
}

/// Serializes a permit reply.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, permit_reply& x) {
  return f(caf::meta::type_name("permit_reply"), x.agent_allowed, x.token,
           x.node, x.agent, x.runtime,
           detail::finite(x.quota_reset_at, "permit_reply.quota_reset_at"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.node, wire::max_id_bytes, "permit_reply.node"},
                {x.runtime, wire::max_id_bytes, "permit_reply.runtime"}});
           }));
}

/// Serializes one agent's breaker state.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, agent_breaker& x) {
  return f(caf::meta::type_name("agent_breaker"), x.agent_id,
           detail::checked(x.state, "breaker.state"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.agent_id, wire::max_id_bytes, "breaker.agent_id"}});
           }));
}

/// Serializes one closed account.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, account_quota& x) {
  return f(caf::meta::type_name("account_quota"), x.account,
           detail::finite(x.reset_at, "quota.reset_at"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.account, wire::max_id_bytes, "quota.account"}});
           }));
}

/// Serializes the health figures.
template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_health& x) {
  return f(caf::meta::type_name("node_health"),
           detail::bounded(x.breakers, "health.breakers"), x.budget_limited,
           detail::finite(x.budget_tokens, "health.budget_tokens"),
           detail::finite(x.budget_capacity, "health.budget_capacity"),
           x.slots_in_use, x.slot_limit, x.queued,
           detail::bounded(x.quotas, "health.quotas"));
}

// -- registration
// --------------------------------------------------------------

/// Registers every message type above (and the libsupervisor types they
/// carry) and the `tasksup` error category with `cfg`. Call once per config,
/// on every node, before the actor system is created.
void register_protocol(caf::actor_system_config& cfg);

// -- schedules (schedule_actor.hpp) ------------------------------------------

/// What a `schedule` request does.
enum class schedule_op : std::uint8_t {
  /// Every schedule (name and document ignored).
  list,
  /// Adds the schedule `name` from its document (a schedule file's JSON).
  add,
  /// Stops firing `name` until it is resumed.
  pause,
  /// Fires `name` again, from now on: what it missed while paused is not
  /// caught up.
  resume,
  /// Deletes `name` (one added by `schedule add`; a file's stays until its
  /// file is removed). A run still going is left to end.
  remove,
};

/// "list", "add", "pause", "resume" or "delete".
std::string_view to_string(schedule_op x) noexcept;

namespace detail {

template<>
struct enum_size<schedule_op> : std::integral_constant<std::size_t, 5> {};

} // namespace detail

/// One `schedule` request.
struct schedule_request {
  schedule_op op = schedule_op::list;
  /// The schedule (not for `list`).
  std::string name;
  /// For `add`: the schedule's JSON text (a schedule file's).
  std::string document;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, schedule_request& x) {
  return f(
    caf::meta::type_name("schedule_request"),
    detail::checked(x.op, "schedule_request.op"), x.name, x.document,
    caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.name, wire::max_id_bytes, "schedule_request.name"},
         {x.document, wire::max_task_json_bytes, "schedule_request.document"}});
    }));
}

/// One schedule as `schedule list` and `status` show it.
struct schedule_info {
  std::string name;
  /// "file" (config/schedules/) or "command" (`schedule add`).
  std::string source;
  /// "every 30s", or "cron 0 3 * * * Europe/Berlin".
  std::string timing;
  /// The overlap policy's name ("skip", ...).
  std::string overlap;
  bool paused = false;
  /// When it fires next (seconds since the Unix epoch); 0 while paused.
  double next_s = 0;
  /// The time its last fire was due (0: never fired).
  double last_s = 0;
  /// The id of its run that has not ended yet, if any.
  std::string running;
  /// Runs it started, and fires its overlap policy skipped.
  std::uint64_t runs = 0;
  std::uint64_t skipped = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, schedule_info& x) {
  return f(caf::meta::type_name("schedule_info"), x.name, x.source, x.timing,
           x.overlap, x.paused,
           detail::finite(x.next_s, "schedule_info.next_s"),
           detail::finite(x.last_s, "schedule_info.last_s"), x.running, x.runs,
           x.skipped, caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.name, wire::max_id_bytes, "schedule_info.name"},
                {x.source, wire::max_id_bytes, "schedule_info.source"},
                {x.timing, wire::max_id_bytes * 4, "schedule_info.timing"},
                {x.overlap, wire::max_id_bytes, "schedule_info.overlap"},
                {x.running, wire::max_id_bytes, "schedule_info.running"}});
           }));
}

/// Times and the latest decision of one task, which `task_status` does not
/// carry (the statistics keep them, see node_stats.hpp).
struct task_times {
  /// 0 when unknown (the task began before the statistics did).
  double submitted_ts = 0;
  double attempt_started_ts = 0;
  /// When the pending retry starts; 0 when none is pending.
  double next_retry_ts = 0;
  double finished_ts = 0;
  /// The latest decision in words ("retry 1/3 in 5 s: ...").
  std::string last_decision;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_times& x) {
  return f(caf::meta::type_name("task_times"),
           detail::finite(x.submitted_ts, "times.submitted_ts"),
           detail::finite(x.attempt_started_ts, "times.attempt_started_ts"),
           detail::finite(x.next_retry_ts, "times.next_retry_ts"),
           detail::finite(x.finished_ts, "times.finished_ts"), x.last_decision,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes({{x.last_decision, wire::max_text_bytes,
                                          "times.last_decision"}});
           }));
}

/// Which of a node's tasks `(status, status_query)` answers, a page at a
/// time: ascending by id, those after `after`, at most `limit` (0: all),
/// each in one of `states` and, when done, with one of `outcomes` (bit i:
/// the enum's value i; 0 does not filter), of agent `agent` ("" does not
/// filter; a task's agent is that of its current or last attempt).
struct status_query {
  std::uint32_t limit = 0;
  std::string after;
  std::uint32_t states = 0;
  std::uint32_t outcomes = 0;
  std::string agent;

  /// Whether `s` passes the filter (not the page bounds).
  bool admits(const task_status& s) const;

  /// Whether the filter can admit a task that has not finished.
  bool admits_unfinished() const;

  /// Whether the filter needs an unfinished task's status (its state or
  /// agent) to decide.
  bool needs_unfinished_status() const;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_query& x) {
  return f(caf::meta::type_name("status_query"), x.limit, x.after, x.states,
           x.outcomes, x.agent, caf::meta::load_callback([&]() -> caf::error {
             if (x.states >= (1u << all_task_states.size()))
               return detail::wire_error("status_query.states",
                                         "an unknown state");
             if (x.outcomes >= (1u << all_task_outcomes.size()))
               return detail::wire_error("status_query.outcomes",
                                         "an unknown outcome");
             return detail::check_sizes(
               {{x.after, wire::max_id_bytes, "status_query.after"},
                {x.agent, wire::max_id_bytes, "status_query.agent"}});
           }));
}

/// One page of a node's tasks: `tasks` in ascending id order, with their
/// times at the same index (`times`, filled by the node's door; empty from
/// a node without statistics) and the node's clock `now`; how many tasks
/// the node has (`total`), how many of them the filter admits (`matched`),
/// and how many of those come after this page (`more`: ask again with
/// `after` the last task's id).
struct status_page {
  std::vector<task_status> tasks;
  std::vector<task_times> times;
  double now = 0;
  std::uint64_t total = 0;
  std::uint64_t matched = 0;
  std::uint64_t more = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_page& x) {
  return f(caf::meta::type_name("status_page"), x.tasks, x.times,
           detail::finite(x.now, "status_page.now"), x.total, x.matched, x.more,
           caf::meta::load_callback([&]() -> caf::error {
             if (x.times.size() > x.tasks.size())
               return detail::wire_error("status_page.times",
                                         "more entries than tasks");
             if (x.matched > x.total || x.more > x.matched ||
                 x.tasks.size() > x.matched)
               return detail::wire_error("status_page.matched",
                                         "counts that do not add up");
             return caf::none;
           }));
}

} // namespace tasksup

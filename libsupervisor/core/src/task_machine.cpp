#include "tasksup/supervisor/task_machine.hpp"

#include "task_machine_help.hpp"

#include "tasksup/supervisor/bounded_number.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tasksup {

using namespace detail::machine;

std::string_view to_string(task_phase x) noexcept {
  switch (x) {
    case task_phase::created:
      return "created";
    case task_phase::waiting:
      return "waiting";
    case task_phase::running:
      return "running";
    case task_phase::classifying:
      return "classifying";
    case task_phase::delaying:
      return "delaying";
    case task_phase::backoff:
      return "backoff";
    case task_phase::done:
      return "done";
    case task_phase::preflight:
      return "preflight";
    case task_phase::gating:
      return "gating";
    case task_phase::delivering:
      return "delivering";
    case task_phase::parked:
      return "parked";
  }
  return "unknown";
}

std::optional<std::string> describe(const effect::finish& f,
                                    const supervisor_config& cfg) {
  if (f.outcome == end_kind::succeeded)
    return std::nullopt;
  switch (f.cause) {
    case end_cause::decision:
      if (f.why)
        return describe(*f.why, cfg);
      return std::string{"failed"};
    case end_cause::attempts_exhausted:
      return "max_total_attempts (" + std::to_string(cfg.max_total_attempts) +
             ") reached";
    case end_cause::user_stop:
      return "stopped by user (" + std::string{stop_name(f.mode)} + ")";
    case end_cause::deadline:
      return "deadline exceeded (" + seconds_text(cfg.deadline_s.value_or(0)) +
             " s)";
    case end_cause::request_failed:
      return std::string{request_name(f.request)} + ": " + f.detail;
    case end_cause::start_refused:
      return "could not start: " + f.detail;
    case end_cause::voluntary:
      return std::nullopt;
    case end_cause::delivery_failed:
      return "delivery failed: " + f.detail;
  }
  return std::string{"failed"};
}

task_cause cause_of(const effect::finish& f) {
  task_cause out;
  switch (f.cause) {
    case end_cause::decision:
      if (f.outcome == end_kind::succeeded) {
        out.reason = end_reason::succeeded;
      } else if (f.why && f.why->classified &&
                 is_node_loss(*f.why->classified)) {
        out.reason = end_reason::node_lost;
        out.node = f.why->classified->lost_node;
      } else {
        out.reason = end_reason::policy_failed;
      }
      if (f.why && f.why->classified)
        out.last_class = f.why->classified->cls;
      break;
    case end_cause::attempts_exhausted:
      out.reason = end_reason::attempts_exhausted;
      break;
    case end_cause::user_stop:
      out.reason = end_reason::user_stop;
      break;
    case end_cause::deadline:
      out.reason = end_reason::deadline;
      break;
    case end_cause::request_failed:
      out.reason = end_reason::request_failed;
      break;
    case end_cause::start_refused:
      out.reason = end_reason::start_refused;
      break;
    case end_cause::voluntary:
      out.reason = end_reason::voluntary;
      break;
    case end_cause::delivery_failed:
      out.reason = end_reason::delivery_failed;
      break;
  }
  return out;
}

task_machine::task_machine(std::shared_ptr<const supervisor_config> cfg,
                           std::size_t chain_size)
  : policy_(std::move(cfg)), backoff_(policy_.config().make_backoff()),
    chain_size_(chain_size) {}

task_machine::task_machine(std::shared_ptr<const supervisor_config> cfg,
                           std::vector<std::string> providers)
  : task_machine(std::move(cfg), providers.size()) {
  providers_ = std::move(providers);
}

task_machine_state task_machine::initial() const {
  task_machine_state st;
  st.counters = policy_.initial_state(chain_size_);
  return st;
}

int task_machine::shown_retry_count(const task_machine_state& st) noexcept {
  return st.plan ? st.plan->retry_count : st.counters.retry_count;
}

bool task_machine::handle(task_machine_state& st, const machine_input& in,
                          double now_s, machine_effects& out) const {
  if (st.phase == task_phase::done)
    return false;
  return std::visit([&](const auto& x) { return on(st, x, now_s, out); }, in);
}

// -- inputs -------------------------------------------------------------------

bool task_machine::on(task_machine_state& st, const input::start&, double now_s,
                      machine_effects& out) const {
  if (st.phase != task_phase::created)
    return false;
  st.started_at_s = now_s;
  if (auto deadline = config().deadline_s; deadline && *deadline > 0)
    out.emplace_back(effect::set_timer{timer_kind::deadline, 0, *deadline});
  begin_attempt(st, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::permission& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::waiting || in.generation != st.generation)
    return false;
  st.holds_slot = true;
  const auto& c = st.counters;
  if (!in.agent_allowed) {
    st.plan.reset();
    act(st, policy_.skip_agent(c, decision_cause::breaker_open, in.agent_id),
        now_s, out);
    return true;
  }
  if (st.plan && !in.token) {
    st.plan.reset();
    act(st, policy_.on_retry_denied(c), now_s, out);
    return true;
  }
  if (!policy_.may_start(c)) {
    effect::finish f;
    f.cause = end_cause::attempts_exhausted;
    finish(st, std::move(f), out);
    return true;
  }
  ++st.attempt;
  ++st.generation;
  st.retry_at_s = 0;
  if (config().steps.preflight) {
    // The preflight says whether this is an attempt at all: a "not now"
    // spends nothing, so the planned retry and the count wait for it.
    st.phase = task_phase::preflight;
    out.emplace_back(
      effect::run_preflight{st.attempt, st.counters.agent_index});
    return true;
  }
  count_started(st);
  launch(st, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::attempt_started& in,
                      double, machine_effects&) const {
  return st.phase == task_phase::running && in.attempt == st.attempt;
}

bool task_machine::on(task_machine_state& st, const input::attempt_ended& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::running || in.attempt != st.attempt)
    return false;
  give_back_slot(st, false, out);
  const auto& o = in.outcome;
  st.last_not_started = !o.started;
  if (o.structured) {
    if (auto& u = o.structured->usage) {
      auto& sum = st.usage ? *st.usage : st.usage.emplace();
      sum += *u;
    }
    if (auto& c = o.structured->cost_usd)
      st.cost_usd = add_cost(st.cost_usd.value_or(0), *c);
  }
  st.last_exit_code = o.exit_code;
  st.last_artifacts = o.artifacts;
  out.emplace_back(effect::attempt_exited{exit_facts(o)});
  if (st.stop != stop_request::none) {
    effect::finish f;
    f.outcome = end_kind::stopped;
    f.cause = end_cause::user_stop;
    f.mode = st.stop;
    finish(st, std::move(f), out);
    return true;
  }
  if (st.deadline_passed) {
    effect::finish f;
    f.cause = end_cause::deadline;
    finish(st, std::move(f), out);
    return true;
  }
  if (st.fallback_requested) {
    st.fallback_requested = false;
    act(st, policy_.skip_agent(st.counters, decision_cause::user_fallback),
        now_s, out);
    return true;
  }
  // "Done, do not restart me": a clean exit after creating the done file,
  // or the configured exit code.
  auto done_code = config().done_exit_code;
  if (o.infrastructure_error.empty() && o.started &&
      ((in.done_file && o.exit_code == 0) ||
       (done_code && o.exit_code == *done_code))) {
    out.emplace_back(effect::voluntary_end{o.exit_code, in.done_file});
    out.emplace_back(effect::report_agent{st.counters.agent_index, true});
    st.voluntary = true;
    st.ended = exit_facts(o);
    if (!answer_passed(st, now_s, out))
      return true;
    if (config().steps.gates) {
      st.phase = task_phase::gating;
      out.emplace_back(effect::run_gates{st.attempt, true});
      return true;
    }
    succeeded(st, now_s, out);
    return true;
  }
  if (o.succeeded()) {
    out.emplace_back(effect::report_agent{st.counters.agent_index, true});
    st.ended = exit_facts(o);
    if (!answer_passed(st, now_s, out))
      return true;
    if (config().steps.gates) {
      st.phase = task_phase::gating;
      out.emplace_back(effect::run_gates{st.attempt, false});
      return true;
    }
    succeeded(st, now_s, out);
    return true;
  }
  // What judging needs (the carrier keeps the tail for the classifier).
  st.ended = exit_facts(o);
  if (st.timed_out) {
    // Stopped for running too long: the stop's exit says nothing more.
    classification c;
    c.cls = error_class::timeout;
    c.rule = "attempt_timeout";
    c.line = "attempt_timeout_s (" +
             seconds_text(config().attempt_timeout_s.value_or(0)) +
             " s) exceeded";
    judge_as(st, std::move(c), true, now_s, out);
    return true;
  }
  if (o.retry_futile) {
    // Starting it again cannot help: the agent is given up at once.
    classification c;
    c.cls = error_class::agent_failure;
    c.rule = "retry_futile";
    c.line = o.infrastructure_error;
    out.emplace_back(effect::classified{c});
    judge(st, std::move(c), now_s, out);
    return true;
  }
  st.phase = task_phase::classifying;
  ++st.generation;
  out.emplace_back(effect::classify{st.generation});
  return true;
}

bool task_machine::on(task_machine_state& st, const input::classified& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::classifying || in.generation != st.generation)
    return false;
  out.emplace_back(effect::classified{in.result});
  // Fatal failures say nothing about the agent's health (a bad key), nor
  // does a used-up quota (its account is closed instead) or a lost worker
  // node.
  if (in.result.cls != error_class::fatal &&
      in.result.cls != error_class::quota_exhausted && !is_node_loss(in.result))
    out.emplace_back(effect::report_agent{st.counters.agent_index, false});
  judge(st, in.result, now_s, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::delay_decided& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::delaying || in.generation != st.generation ||
      !st.plan)
    return false;
  st.previous_delay_s = in.delay.delay_s;
  out.emplace_back(effect::retry_scheduled{*st.plan, in.delay});
  st.phase = task_phase::backoff;
  if (in.delay.delay_s <= 0) {
    begin_attempt(st, out);
    return true;
  }
  ++st.generation;
  st.retry_at_s = now_s + in.delay.delay_s;
  out.emplace_back(
    effect::set_timer{timer_kind::backoff, st.generation, in.delay.delay_s});
  return true;
}

bool task_machine::on(task_machine_state& st, const input::timer& in,
                      double now_s, machine_effects& out) const {
  if (in.kind == timer_kind::attempt) {
    // Only the attempt it was set for, while it runs and nothing else is
    // already stopping it (a user stop, a forced fallback, the deadline).
    if (!config().attempt_timeout_s || st.phase != task_phase::running ||
        in.generation != static_cast<std::uint64_t>(st.attempt) ||
        st.timed_out || st.stop != stop_request::none ||
        st.fallback_requested || st.deadline_passed)
      return false;
    st.timed_out = true;
    out.emplace_back(
      effect::attempt_timed_out{config().attempt_timeout_s.value_or(0)});
    out.emplace_back(
      effect::stop_attempt{stop_request::cancel, config().stop_grace_s});
    return true;
  }
  if (in.kind == timer_kind::backoff) {
    if (st.phase != task_phase::backoff || in.generation != st.generation)
      return false;
    begin_attempt(st, out);
    return true;
  }
  if (in.kind == timer_kind::quota) {
    if (st.phase != task_phase::parked || in.generation != st.generation ||
        !waits_in_park(st))
      return false;
    // The quota has reset, or the "not now" is waited out: the same agent
    // again (a paused task stays parked until resumed).
    st.resume_at_s = 0;
    st.not_now = false;
    if (!st.paused)
      begin_attempt(st, out);
    return true;
  }
  // The task's optional deadline (off unless set): a running
  // attempt is cancelled gracefully and its exit fails the task; anywhere
  // else the task fails at once. Retry and fallback are bypassed.
  (void)now_s;
  if (st.deadline_passed)
    return false;
  st.deadline_passed = true;
  auto deadline = config().deadline_s.value_or(0);
  if (st.phase == task_phase::running) {
    out.emplace_back(effect::deadline_passed{deadline, true});
    // Already stopping: the user's stop decides the outcome.
    if (st.stop == stop_request::none)
      out.emplace_back(
        effect::stop_attempt{stop_request::cancel, config().stop_grace_s});
    return true;
  }
  out.emplace_back(effect::deadline_passed{deadline, false});
  effect::finish f;
  f.cause = end_cause::deadline;
  finish(st, std::move(f), out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::stop& in, double,
                      machine_effects& out) const {
  if (in.mode == stop_request::none)
    return false;
  if (st.phase == task_phase::running) {
    // A kill after a cancel escalates; anything else is a repeat.
    if (st.stop != stop_request::none &&
        (in.mode != stop_request::kill || st.stop == stop_request::kill))
      return true;
    st.stop = in.mode;
    out.emplace_back(effect::user_stopped{in.mode, false});
    out.emplace_back(effect::stop_attempt{
      in.mode, in.mode == stop_request::cancel ? config().stop_grace_s : 0});
    return true;
  }
  auto skipped = st.phase == task_phase::classifying ||
                 st.phase == task_phase::delaying ||
                 st.phase == task_phase::backoff ||
                 (st.phase == task_phase::parked && st.plan);
  out.emplace_back(effect::user_stopped{in.mode, skipped});
  effect::finish f;
  f.outcome = end_kind::stopped;
  f.cause = end_cause::user_stop;
  f.mode = in.mode;
  finish(st, std::move(f), out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::retry_now&,
                      double now_s, machine_effects& out) const {
  if (st.phase == task_phase::parked && st.not_now && !st.paused) {
    // Cuts a "not now" short, as it does a backoff.
    out.emplace_back(
      effect::retry_requested{std::max(0.0, st.resume_at_s - now_s)});
    st.resume_at_s = 0;
    st.not_now = false;
    begin_attempt(st, out);
    return true;
  }
  if (st.phase != task_phase::backoff)
    return false;
  out.emplace_back(
    effect::retry_requested{std::max(0.0, st.retry_at_s - now_s)});
  begin_attempt(st, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::force_fallback&,
                      double now_s, machine_effects& out) const {
  // Nothing changes when there is nowhere to fall back to.
  if (st.phase == task_phase::created || st.phase == task_phase::gating ||
      st.phase == task_phase::delivering ||
      !policy_.has_next_agent(st.counters))
    return false;
  if (st.phase == task_phase::running) {
    if (st.stop != stop_request::none || st.fallback_requested)
      return false;
    // Stop the attempt; its exit then moves to the next agent.
    st.fallback_requested = true;
    out.emplace_back(
      effect::stop_attempt{stop_request::cancel, config().stop_grace_s});
    return true;
  }
  // Whatever was pending (a reply, a timer, a place in the queue) is
  // superseded; a slot already granted is kept for the next agent.
  if (st.phase == task_phase::waiting && !st.holds_slot)
    out.emplace_back(effect::release_slot{});
  st.plan.reset();
  st.ended.reset();
  act(st, policy_.skip_agent(st.counters, decision_cause::user_fallback), now_s,
      out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::reply_failed& in,
                      double now_s, machine_effects& out) const {
  if (in.request == request_kind::rules) {
    effect::finish f;
    f.cause = end_cause::request_failed;
    f.request = in.request;
    f.detail = in.error;
    finish(st, std::move(f), out);
    return true;
  }
  if (in.generation != st.generation)
    return false;
  switch (in.request) {
    case request_kind::classify: {
      if (st.phase != task_phase::classifying)
        return false;
      // Without a classifier the failure is treated as transient.
      classification c;
      c.cls = error_class::retryable;
      c.rule = "classifier_unavailable";
      c.line = in.error;
      out.emplace_back(effect::classified{c});
      judge(st, std::move(c), now_s, out);
      return true;
    }
    case request_kind::permission:
      if (st.phase != task_phase::waiting)
        return false;
      break;
    case request_kind::delay:
      if (st.phase != task_phase::delaying)
        return false;
      break;
    case request_kind::rules:
      break;
  }
  effect::finish f;
  f.cause = end_cause::request_failed;
  f.request = in.request;
  f.detail = in.error;
  finish(st, std::move(f), out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::resumed&,
                      double now_s, machine_effects& out) const {
  if (st.phase == task_phase::created)
    return on(st, input::start{}, now_s, out);
  // The deadline keeps counting from the task's start.
  if (auto deadline = config().deadline_s;
      deadline && *deadline > 0 && !st.deadline_passed)
    out.emplace_back(
      effect::set_timer{timer_kind::deadline, 0,
                        std::max(0.0, st.started_at_s + *deadline - now_s)});
  switch (st.phase) {
    case task_phase::created:
    case task_phase::done:
      break;
    case task_phase::waiting:
      // The old node's queue is gone: queue again (a slot the task held
      // while waiting is gone with it).
      st.holds_slot = false;
      begin_attempt(st, out);
      break;
    case task_phase::running:
      // The attempt may outlive the node: the node counts its slot and
      // adopts it; its end comes as attempt_ended. Its timeout starts
      // again (when it started is not known to the machine).
      out.emplace_back(effect::reclaim_slot{});
      out.emplace_back(
        effect::adopt_attempt{st.attempt, st.counters.agent_index});
      if (auto t = config().attempt_timeout_s; t && *t > 0)
        out.emplace_back(effect::set_timer{
          timer_kind::attempt, static_cast<std::uint64_t>(st.attempt), *t});
      break;
    case task_phase::preflight:
      // A step that ran when the node died runs again.
      if (st.holds_slot)
        out.emplace_back(effect::reclaim_slot{});
      out.emplace_back(
        effect::run_preflight{st.attempt, st.counters.agent_index});
      break;
    case task_phase::gating:
      if (st.holds_slot)
        out.emplace_back(effect::reclaim_slot{});
      out.emplace_back(effect::run_gates{st.attempt, st.voluntary});
      break;
    case task_phase::delivering:
      if (st.holds_slot)
        out.emplace_back(effect::reclaim_slot{});
      out.emplace_back(effect::deliver{st.attempt});
      break;
    case task_phase::classifying:
      out.emplace_back(effect::classify{++st.generation});
      break;
    case task_phase::delaying:
      ask_delay(st, out);
      break;
    case task_phase::backoff:
      // Only the time left.
      out.emplace_back(effect::set_timer{timer_kind::backoff, ++st.generation,
                                         std::max(0.0, st.retry_at_s - now_s)});
      break;
    case task_phase::parked:
      // A quota wait or a "not now" goes on for the time left; a paused
      // task stays put.
      if (waits_in_park(st))
        out.emplace_back(
          effect::set_timer{timer_kind::quota, ++st.generation,
                            std::max(0.0, st.resume_at_s - now_s)});
      else if (!st.paused)
        begin_attempt(st, out);
      break;
  }
  return true;
}

bool task_machine::on(task_machine_state& st, const input::preflight_done& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::preflight || in.attempt != st.attempt)
    return false;
  if (in.passed) {
    // Whatever was not ready is now: the next "not now" waits the first
    // step again.
    st.not_now_streak = 0;
    count_started(st);
    launch(st, out);
    return true;
  }
  // The agent never ran: give the slot back and judge the skip by its own
  // class; the agent's health is not in question.
  give_back_slot(st, false, out);
  st.last_not_started = true;
  attempt_outcome o;
  o.exit_code = in.exit_code == 0 ? 1 : in.exit_code;
  o.started = false;
  st.ended = o;
  classification c;
  if (!in.timed_out && in.exit_code == not_now_exit_code) {
    // "Not now": no attempt was made, none is counted, and a planned retry
    // is still to come.
    c.cls = error_class::not_now;
    c.rule = "preflight_not_now";
    c.line = in.detail;
  } else {
    count_started(st);
    c.cls = error_class::preflight_failed;
    c.rule = "preflight";
    c.line = in.timed_out ? "preflight timed out" : in.detail;
  }
  judge_as(st, std::move(c), false, now_s, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::gates_done& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::gating || in.attempt != st.attempt)
    return false;
  if (in.passed) {
    succeeded(st, now_s, out);
    return true;
  }
  // The agent's work did not pass: a failure of the attempt, judged like
  // one (the gate's exit code stands for the attempt's).
  st.voluntary = false;
  if (st.ended)
    st.ended->exit_code = in.exit_code == 0 ? 1 : in.exit_code;
  classification c;
  c.cls = error_class::gate_failed;
  c.rule = "gate:" + in.gate;
  c.line = in.timed_out ? "gate " + in.gate + " timed out" : in.detail;
  judge_as(st, std::move(c), false, now_s, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::answer_checked& in,
                      double, machine_effects&) const {
  // Only the running attempt's answer, before its end is judged.
  if (st.phase != task_phase::running || in.attempt != st.attempt)
    return false;
  answer_check c;
  c.attempt = in.attempt;
  c.ok = in.ok;
  if (in.ok)
    c.answer = in.answer;
  else
    c.errors = in.errors;
  st.answer = std::move(c);
  return true;
}

bool task_machine::answer_passed(task_machine_state& st, double now_s,
                                 machine_effects& out) const {
  auto checked = st.answer && st.answer->attempt == st.attempt;
  if (!config().steps.answer || (checked && st.answer->ok))
    return true;
  // The agent's work is not usable as it stands: a failure of the attempt,
  // judged like one (as a failed exit), the schema errors passed on as
  // feedback.
  st.voluntary = false;
  if (st.ended && st.ended->exit_code == 0)
    st.ended->exit_code = 1;
  classification c;
  c.cls = error_class::invalid_output;
  if (!checked) {
    c.rule = "answer";
    c.line = "the answer was not checked";
  } else {
    c.rule = "answer_schema";
    const auto& errors = st.answer->errors;
    c.line = errors.substr(0, errors.find('\n'));
  }
  judge_as(st, std::move(c), false, now_s, out);
  return false;
}

bool task_machine::on(task_machine_state& st, const input::delivered& in,
                      double, machine_effects& out) const {
  if (st.phase != task_phase::delivering || in.attempt != st.attempt)
    return false;
  effect::finish f;
  if (in.ok) {
    f.outcome = end_kind::succeeded;
    f.cause = st.voluntary ? end_cause::voluntary : end_cause::decision;
    f.why = st.ending.take();
  } else {
    f.cause = end_cause::delivery_failed;
    f.detail = in.detail;
  }
  finish(st, std::move(f), out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::quota_closed& in,
                      double now_s, machine_effects& out) const {
  if (st.phase != task_phase::waiting || in.generation != st.generation)
    return false;
  // The agent's account is closed until its quota resets: wait for it (a
  // planned retry keeps its plan and spends its token after the reset) or
  // move on, as `on_quota` says.
  auto d = policy_.on_quota(st.counters, decision_cause::quota_closed,
                            std::min(in.resume_at_s, now_s + max_quota_wait_s),
                            now_s, in.account);
  if (d.step != next_step::wait_quota)
    st.plan.reset();
  act(st, std::move(d), now_s, out);
  return true;
}

bool task_machine::on(task_machine_state& st, const input::pause&, double,
                      machine_effects& out) const {
  if (st.paused)
    return false;
  st.paused = true;
  switch (st.phase) {
    case task_phase::waiting:
      // Out of the queue (or the slot just granted, given back); the
      // pending answer is superseded.
      out.emplace_back(effect::task_paused{true});
      park(st, out);
      return true;
    case task_phase::backoff:
      // The rest of the backoff is kept for the resume.
      out.emplace_back(effect::task_paused{true});
      park(st, out);
      return true;
    case task_phase::parked:
      out.emplace_back(effect::task_paused{true});
      return true;
    default:
      // Whatever runs (the attempt, its judging, its gates) finishes; the
      // next attempt does not start.
      out.emplace_back(effect::task_paused{false});
      return true;
  }
}

bool task_machine::on(task_machine_state& st, const input::resume&,
                      double now_s, machine_effects& out) const {
  if (!st.paused)
    return false;
  st.paused = false;
  out.emplace_back(effect::task_resumed{});
  if (st.phase != task_phase::parked || waits_in_park(st))
    return true; // running on, or a quota wait or "not now" under way
  if (st.retry_at_s > now_s) {
    // Paused in a backoff: wait out what was left of it.
    st.phase = task_phase::backoff;
    out.emplace_back(effect::set_timer{timer_kind::backoff, ++st.generation,
                                       st.retry_at_s - now_s});
    return true;
  }
  begin_attempt(st, out);
  return true;
}

} // namespace tasksup

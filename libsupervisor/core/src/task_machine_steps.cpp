// The task machine's steps: what the inputs' handlers (task_machine.cpp) do
// to start an attempt, judge its end, act on the decision (retry, fall back,
// park, finish) and give back what the task holds.

#include "task_machine_help.hpp"

#include "tasksup/supervisor/bounded_number.hpp"

#include <algorithm>
#include <utility>

namespace tasksup {

using namespace detail::machine;

// -- steps --------------------------------------------------------------------

void task_machine::launch(task_machine_state& st, machine_effects& out) const {
  st.phase = task_phase::running;
  st.timed_out = false;
  st.voluntary = false;
  out.emplace_back(effect::start_attempt{st.attempt, st.counters.agent_index});
  if (auto t = config().attempt_timeout_s; t && *t > 0)
    out.emplace_back(effect::set_timer{
      timer_kind::attempt, static_cast<std::uint64_t>(st.attempt), *t});
}

void task_machine::succeeded(task_machine_state& st, double now_s,
                             machine_effects& out) const {
  auto o = st.ended ? std::move(*st.ended) : attempt_outcome{};
  st.ended.reset();
  o.exit_code = 0;
  if (st.voluntary) {
    decision d;
    d.step = next_step::succeed;
    d.cause = decision_cause::succeeded;
    d.rule = decision_rule::success;
    d.agent_index = st.counters.agent_index;
    d.chain_size = st.counters.chain_size;
    d.retry_count = st.counters.retry_count;
    d.at_s = now_s;
    if (config().steps.deliver) {
      st.ending = std::move(d);
      st.phase = task_phase::delivering;
      out.emplace_back(effect::deliver{st.attempt});
      return;
    }
    effect::finish f;
    f.outcome = end_kind::succeeded;
    f.cause = end_cause::voluntary;
    f.why = std::move(d);
    finish(st, std::move(f), out);
    return;
  }
  auto d = policy_.on_exit(st.counters, o, std::nullopt, now_s);
  if (d.step == next_step::succeed && config().steps.deliver) {
    st.ending = std::move(d);
    st.phase = task_phase::delivering;
    out.emplace_back(effect::deliver{st.attempt});
    return;
  }
  act(st, std::move(d), now_s, out);
}

void task_machine::judge_as(task_machine_state& st, classification c,
                            bool report, double now_s,
                            machine_effects& out) const {
  out.emplace_back(effect::classified{c});
  if (report)
    out.emplace_back(effect::report_agent{st.counters.agent_index, false});
  judge(st, std::move(c), now_s, out);
}

void task_machine::begin_attempt(task_machine_state& st,
                                 machine_effects& out) const {
  if (!policy_.may_start(st.counters)) {
    effect::finish f;
    f.cause = end_cause::attempts_exhausted;
    finish(st, std::move(f), out);
    return;
  }
  if (st.paused) {
    park(st, out);
    return;
  }
  st.phase = task_phase::waiting;
  ++st.generation;
  out.emplace_back(effect::ask_permission{st.generation,
                                          st.counters.agent_index,
                                          !st.holds_slot, st.plan.has_value()});
}

void task_machine::judge(task_machine_state& st,
                         std::optional<classification> c, double now_s,
                         machine_effects& out) const {
  auto ended = std::move(st.ended);
  st.ended.reset();
  attempt_outcome o = ended ? std::move(*ended) : attempt_outcome{};
  if (!ended)
    o.exit_code = 1;
  act(st, policy_.on_exit(st.counters, o, c, now_s, providers_), now_s, out);
}

void task_machine::act(task_machine_state& st, decision d, double now_s,
                       machine_effects& out) const {
  if (d.step != next_step::wait_not_now)
    st.not_now_streak = 0;
  switch (d.step) {
    case next_step::succeed: {
      effect::finish f;
      f.outcome = end_kind::succeeded;
      f.why = std::move(d);
      finish(st, std::move(f), out);
      return;
    }
    case next_step::fail: {
      effect::finish f;
      f.why = std::move(d);
      finish(st, std::move(f), out);
      return;
    }
    case next_step::wait_quota:
      park_for_quota(st, std::move(d), now_s, out);
      return;
    case next_step::wait_not_now:
      park_not_now(st, std::move(d), now_s, out);
      return;
    case next_step::switch_agent: {
      auto from = st.counters.agent_index;
      if (d.rule == decision_rule::quota_fallback &&
          d.cause == decision_cause::failed)
        out.emplace_back(effect::close_account{from, d.resume_at_s});
      st.resume_at_s = 0;
      st.not_now = false;
      // A retry planned for the agent left behind (a "not now" kept it)
      // is not the next agent's.
      st.plan.reset();
      policy_.apply(st.counters, d);
      out.emplace_back(effect::agent_switched{from, std::move(d)});
      begin_attempt(st, out);
      return;
    }
    case next_step::retry: {
      if (!d.backoff_class) {
        // A permanent task restarting after exit 0 waits its own schedule,
        // from the first step again after a stable run.
        if (d.reset_retries)
          st.restart_streak = 0;
        st.restart_streak = std::min(st.restart_streak + 1, 1 << 20);
      }
      st.plan = std::move(d);
      st.phase = task_phase::delaying;
      ask_delay(st, out);
      return;
    }
  }
}

void task_machine::ask_delay(task_machine_state& st,
                             machine_effects& out) const {
  const auto& d = *st.plan;
  if (d.classified && is_node_loss(*d.classified)) {
    // The attempt was lost with its node, not failed: it runs again at once
    // on another node, with no backoff to wait.
    delay_decision now; // no delay, by no schedule
    st.previous_delay_s = 0;
    out.emplace_back(effect::retry_scheduled{d, now});
    st.phase = task_phase::backoff;
    begin_attempt(st, out);
    return;
  }
  effect::ask_delay ask;
  if (!d.backoff_class) {
    // The restart of a permanent task after exit 0 (`restart_streak`
    // counts it already).
    ask.spec = config().restart_backoff;
    ask.retry_index = st.restart_streak - 1;
  } else {
    // Each class's schedule counts that class's retries: a rate limit after
    // two crashes waits the rate-limit schedule's first step. The plan is
    // applied when its attempt starts, so the counters do not include it.
    ask.spec = backoff_.spec(*d.backoff_class);
    ask.retry_index =
      d.reset_retries ? 0 : retries_of(st.counters, *d.backoff_class);
  }
  ask.previous_s = st.previous_delay_s;
  // Only a rate-limit message's "come back in N s" sets the delay; other
  // output that happens to mention a retry is not trusted for timing.
  if (d.classified && d.classified->cls == error_class::rate_limit)
    ask.hint_s = d.classified->retry_after_s;
  ask.generation = ++st.generation;
  out.emplace_back(std::move(ask));
}

void task_machine::park_for_quota(task_machine_state& st, decision d,
                                  double now_s, machine_effects& out) const {
  // An attempt that hit the quota closes the account for every task; a
  // task refused at the door only waits.
  if (d.cause == decision_cause::failed)
    out.emplace_back(
      effect::close_account{st.counters.agent_index, d.resume_at_s});
  give_back_slot(st, false, out);
  st.phase = task_phase::parked;
  st.retry_at_s = 0;
  st.not_now = false;
  st.resume_at_s = std::max(d.resume_at_s, now_s);
  ++st.generation;
  out.emplace_back(effect::set_timer{timer_kind::quota, st.generation,
                                     st.resume_at_s - now_s});
  out.emplace_back(effect::quota_wait{st.counters.agent_index, std::move(d)});
}

void task_machine::park_not_now(task_machine_state& st, decision d,
                                double now_s, machine_effects& out) const {
  auto wait =
    scheduled_delay_s(backoff_.spec(error_class::not_now), st.not_now_streak);
  st.not_now_streak = std::min(st.not_now_streak + 1, 1 << 20);
  d.count = st.not_now_streak;
  d.resume_at_s = now_s + wait;
  give_back_slot(st, false, out);
  st.phase = task_phase::parked;
  st.retry_at_s = 0;
  st.not_now = true;
  st.resume_at_s = d.resume_at_s;
  ++st.generation;
  out.emplace_back(effect::set_timer{timer_kind::quota, st.generation, wait});
  out.emplace_back(effect::not_now_wait{st.counters.agent_index, std::move(d)});
}

bool task_machine::waits_in_park(const task_machine_state& st) noexcept {
  return st.resume_at_s > 0 || st.not_now;
}

void task_machine::count_started(task_machine_state& st) const {
  if (st.plan) {
    policy_.apply(st.counters, *st.plan);
    st.plan.reset();
  }
  policy_.count_attempt(st.counters);
}

void task_machine::park(task_machine_state& st, machine_effects& out) const {
  // Out of the queue, or the slot given back; a pending answer or timer is
  // superseded by the new generation.
  give_back_slot(st, st.phase == task_phase::waiting, out);
  st.phase = task_phase::parked;
  ++st.generation;
}

void task_machine::finish(task_machine_state& st, effect::finish f,
                          machine_effects& out) const {
  give_back_slot(st, st.phase == task_phase::waiting, out);
  st.phase = task_phase::done;
  st.plan.reset();
  st.ended.reset();
  st.ending.reset();
  st.retry_at_s = 0;
  st.resume_at_s = 0;
  st.not_now = false;
  ++st.generation;
  out.emplace_back(std::move(f));
}

} // namespace tasksup

// The task supervisor carries the task machine (libsupervisor's
// task_machine): it turns messages into the machine's inputs and the
// machine's effects into sends, requests, timers and spawns. Every decision
// and every delay is made by the machine. Its worker, its hooks and its
// resumption after a restart are in the files supervisor_state.hpp names.

#include "tasksup/actors/task_supervisor_actor.hpp"

#include "actor_now.hpp"
#include "supervisor_state.hpp"
#include "task_settings.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/events.hpp"

#include "tasksup/supervisor/time_words.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

namespace {

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
    std::chrono::duration<double>(seconds));
}

stop_mode to_stop_mode(stop_request x) {
  return x == stop_request::kill ? stop_mode::kill : stop_mode::cancel;
}

/// The `cause` of an agent_switched event.
std::string_view switch_cause(decision_cause x) {
  switch (x) {
    case decision_cause::succeeded:
    case decision_cause::failed:
      return "failure";
    case decision_cause::retry_budget_exhausted:
      return "retry_budget";
    case decision_cause::breaker_open:
      return "breaker_open";
    case decision_cause::user_fallback:
      return "user";
    case decision_cause::quota_closed:
      return "quota";
  }
  return "failure";
}

/// A backoff this long lets the kept worker go (the next attempt spawns one).
constexpr double release_worker_after_s = 1.0;

/// Carries out one effect; an input it produces at once (a permission when
/// there are no node services) goes to `next`.
struct carrier {
  supervisor_actor self;
  std::vector<machine_input>& next;

  supervisor_state& st() const { return self->state; }

  void operator()(const effect::ask_permission& e) const {
    const auto& agent = st().agent(e.agent_index);
    auto& agent_id = agent.agent_id;
    if (!st().node->services) {
      next.emplace_back(input::permission{e.generation, true, true, agent_id});
      return;
    }
    auto gen = e.generation;
    auto* s = self;
    permit_request req;
    req.task_id = st().task_id();
    req.agent_id = agent_id;
    req.account = agent.account;
    req.need_slot = e.need_slot;
    req.need_token = e.need_token;
    // No timeout: waiting in the queue for a slot may take as long as the
    // tasks before this one run. The registry is on this node.
    self
      ->request(st().node->services, caf::infinite, permit_atom::value,
                std::move(req))
      .then(
        [s, gen, agent_id, account = agent.quota_account()](permit_reply r) {
          if (r.quota_reset_at > 0) {
            drive(s, input::quota_closed{gen, account, r.quota_reset_at});
            return;
          }
          auto& st = s->state;
          st.placed_node = std::move(r.node);
          st.placed_agent = std::move(r.agent);
          st.placed_runtime = std::move(r.runtime);
          drive(s, input::permission{gen, r.agent_allowed, r.token, agent_id});
        },
        [s, gen](caf::error& err) {
          drive(s, input::reply_failed{gen, request_kind::permission,
                                       error_text(err)});
        });
  }

  void operator()(const effect::release_slot&) const {
    if (st().node->services)
      self->send(st().node->services, release_atom::value, st().task_id());
  }

  void operator()(const effect::reclaim_slot&) const {
    if (st().node->services)
      self->send(st().node->services, reclaim_atom::value, st().task_id());
  }

  void operator()(const effect::adopt_attempt& e) const {
    if (auto ended = adopt_worker(self, e.agent_index, e.attempt))
      next.emplace_back(std::move(*ended));
  }

  void operator()(const effect::start_attempt& e) const {
    auto& s = st();
    if (s.span_attempt != e.attempt) {
      s.span = s.ids->span_id();
      s.span_attempt = e.attempt;
    }
    auto spec = make_attempt_spec(*s.opts, *s.node, s.agent(e.agent_index),
                                  e.attempt, std::string_view{s.span});
    if (s.run)
      prepare_attempt(self, std::move(spec), e.agent_index, e.attempt);
    else
      spawn_worker(self, std::move(spec), e.agent_index);
  }

  void operator()(const effect::run_preflight& e) const {
    run_preflight(self, e.attempt);
  }

  void operator()(const effect::run_gates& e) const {
    run_gates(self, e.attempt);
  }

  void operator()(const effect::deliver& e) const {
    deliver_change(self, e.attempt);
  }

  void operator()(const effect::attempt_timed_out& e) const {
    char buf[96];
    std::snprintf(buf, sizeof(buf),
                  "attempt_timeout_s (%g s) exceeded: stopping the attempt",
                  e.timeout_s);
    emit(self, step_event(st().head(), "attempt_timeout", "", false,
                          std::nullopt, buf));
  }

  void operator()(const effect::voluntary_end& e) const {
    emit(self,
         step_event(st().head(), "voluntary_end", "", true, e.exit_code,
                    e.done_file ? "the agent created its done file"
                                : "the agent exited with done_exit_code"));
  }

  void operator()(const effect::stop_attempt& e) const {
    stop_worker(self, to_stop_mode(e.mode),
                std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::duration<double>(e.grace_s)));
  }

  void operator()(const effect::classify& e) const {
    auto& s = st();
    classify_request req;
    req.task_id = s.task_id();
    req.outcome = std::move(*s.to_classify);
    s.to_classify.reset();
    req.agent_cli = s.agent().agent_cli;
    auto gen = e.generation;
    auto* me = self;
    ++s.asking;
    self
      ->request(s.node->classifier, caf::infinite, classify_atom::value,
                std::move(req))
      .then(
        [me, gen](classification& c) {
          --me->state.asking;
          drive(me, input::classified{gen, std::move(c)});
        },
        [me, gen](caf::error& err) {
          --me->state.asking;
          drive(me, input::reply_failed{gen, request_kind::classify,
                                        error_text(err)});
        });
  }

  void operator()(const effect::ask_delay& e) const {
    delay_request req{e.spec, e.retry_index, e.previous_s, e.hint_s};
    auto gen = e.generation;
    auto* me = self;
    ++st().asking;
    self
      ->request(st().node->backoff, caf::infinite, delay_atom::value,
                std::move(req))
      .then(
        [me, gen](delay_decision d) {
          --me->state.asking;
          drive(me, input::delay_decided{gen, d});
        },
        [me, gen](caf::error& err) {
          --me->state.asking;
          drive(me,
                input::reply_failed{gen, request_kind::delay, error_text(err)});
        });
  }

  void operator()(const effect::set_timer& e) const {
    // A worker kept for the next attempt costs ~3 KB while the task waits:
    // worth it between quick retries, not over a long backoff.
    if (e.kind == timer_kind::backoff && e.delay_s >= release_worker_after_s)
      release_kept_worker(self);
    // A timer that is due at once (a zero backoff) is a message to itself:
    // CAF's clock would take a lock and wake its thread for it.
    auto fire = [&](auto... xs) {
      if (e.delay_s > 0)
        self->delayed_send(self, to_duration(e.delay_s), xs...);
      else
        self->send(self, xs...);
    };
    if (e.kind == timer_kind::quota)
      release_kept_worker(self);
    if (e.kind == timer_kind::attempt)
      fire(attempt_timer_atom::value, e.generation);
    else if (e.kind == timer_kind::quota)
      fire(quota_timer_atom::value, e.generation);
    else if (e.kind == timer_kind::backoff)
      fire(backoff_timer_atom::value, e.generation);
    else
      fire(deadline_atom::value);
  }

  void operator()(const effect::report_agent& e) const {
    if (st().node->services)
      self->send(st().node->services, agent_result_atom::value,
                 st().agent(e.agent_index).agent_id, e.success);
  }

  void operator()(const effect::close_account& e) const {
    if (st().node->services)
      self->send(st().node->services, close_account_atom::value,
                 st().agent(e.agent_index).quota_account(), e.resume_at_s);
  }

  void operator()(const effect::quota_wait& e) const {
    auto& s = st();
    emit(self, step_event(s.head(), "quota_wait",
                          s.agent(e.agent_index).quota_account(), false,
                          std::nullopt, describe(e.why, s.machine().config())));
  }

  void operator()(const effect::not_now_wait& e) const {
    auto& s = st();
    emit(self,
         step_event(s.head(), "not_now", s.agent(e.agent_index).agent_id, false,
                    std::nullopt, describe(e.why, s.machine().config())));
  }

  void operator()(const effect::task_paused& e) const {
    emit(self, step_event(st().head(), "pause", "", true, std::nullopt,
                          e.parked ? "paused by user"
                                   : "paused by user: no attempt starts after "
                                     "the running one"));
  }

  void operator()(const effect::task_resumed&) const {
    emit(self, step_event(st().head(), "resume", "", true, std::nullopt,
                          "resumed by user"));
  }

  void operator()(const effect::attempt_exited& e) const {
    emit(self, attempt_exited_event(st().head(), e.outcome));
  }

  void operator()(const effect::classified& e) const {
    emit(self, classified_event(st().head(), e.result));
    if (st().run)
      remember_failure(self, e.result);
  }

  void operator()(const effect::retry_scheduled& e) const {
    auto& s = st();
    const auto& cfg = s.machine().config();
    auto restart =
      e.plan.rule == decision_rule::restart
        ? static_cast<int>(std::max<std::size_t>(1, e.plan.restarts))
        : 0;
    emit(self, retry_scheduled_event(
                 s.head(), e.plan.retry_count, cfg.max_retries_per_agent,
                 s.agent().agent_id, e.delay, describe(e.plan, cfg), restart,
                 e.plan.ran_s, e.plan.reset_retries));
  }

  void operator()(const effect::agent_switched& e) const {
    auto& s = st();
    emit(self, agent_switched_event(s.head(), s.agent(e.from).agent_id,
                                    s.agent(e.switched.agent_index).agent_id,
                                    describe(e.switched, s.machine().config()),
                                    switch_cause(e.switched.cause)));
  }

  void operator()(const effect::user_stopped& e) const {
    const char* text = e.skipped_retry ? "retry skipped due to user stop"
                       : e.mode == stop_request::kill ? "user_kill requested"
                                                      : "user_cancel requested";
    emit(self, user_stop_event(st().head(), to_stop_mode(e.mode), text));
  }

  void operator()(const effect::retry_requested& e) const {
    char buf[96];
    std::snprintf(buf, sizeof(buf),
                  "immediate retry requested by user (%.0f s of backoff "
                  "skipped)",
                  e.skipped_s);
    emit(self,
         step_event(st().head(), "user_retry", "", true, std::nullopt, buf));
  }

  void operator()(const effect::deadline_passed& e) const {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "deadline exceeded (%g s): %s",
                  e.deadline_s,
                  e.stopping ? "stopping the attempt" : "no further attempt");
    emit(self, warning_event(st().head(), buf));
  }

  void operator()(const effect::finish& e) const {
    auto& s = st();
    task_result r;
    r.task_id = s.task_id();
    switch (e.outcome) {
      case end_kind::succeeded:
        r.outcome = task_outcome::succeeded;
        break;
      case end_kind::failed:
        r.outcome = task_outcome::failed;
        break;
      case end_kind::stopped:
        r.outcome = task_outcome::stopped;
        break;
    }
    // -1 when no attempt ran (or the last one never started).
    if (s.m.last_exit_code && !s.m.last_not_started) {
      r.exit_code = *s.m.last_exit_code;
      r.artifacts = std::move(s.m.last_artifacts);
    }
    // The answer of the attempt that succeeded, as checked.
    if (auto& a = s.m.answer; e.outcome == end_kind::succeeded && a && a->ok &&
                              a->attempt == s.m.attempt)
      r.answer = std::move(a->answer);
    r.error = describe(e, s.machine().config());
    r.cause = cause_of(e);
    if (s.run)
      end_hooks(self, e.outcome != end_kind::succeeded, r.artifacts);
    const auto& c = s.m.counters;
    r.metadata.agent_used = s.agent().agent_cli;
    r.metadata.agent_id = s.agent().agent_id;
    r.metadata.retry_count = c.retry_count;
    r.metadata.total_attempts = c.total_attempts;
    r.metadata.fallback_count = c.fallback_count;
    r.metadata.total_retries = c.total_retries;
    r.metadata.usage = s.m.usage;
    r.metadata.cost_usd = s.m.cost_usd;
    for (std::size_t i = 0; i < c.retries_by_agent.size(); ++i)
      if (c.retries_by_agent[i] > 0)
        r.metadata.retries_by_agent[s.agent(i).agent_id] +=
          c.retries_by_agent[i];
    emit(self, task_done_event(s.head(false), r));
    if (s.has_own_rules)
      self->send(s.node->classifier, drop_rules_atom::value, s.task_id());
    auto outcome = r.outcome;
    // The events come before the result, whatever the supervisor waited on.
    flush_events(self);
    self->send(s.parent, escalate_atom::value, std::move(r));
    emit(self, escalated_event(s.head(false), outcome,
                               caf::to_string(s.parent.address())));
    flush_events(self);
    self->quit();
  }
};

/// Buffers for the effects of one input, shared by the supervisors of a
/// scheduler thread: an effect takes ~370 bytes, and a buffer kept per
/// supervisor for its capacity held ~1.5 KB in every parked task
/// (BENCHMARKS.md §2). A nested drive takes a buffer of its own.
class effect_buffers {
public:
  static machine_effects take() {
    auto& pool = buffers();
    if (pool.empty())
      return {};
    auto fx = std::move(pool.back());
    pool.pop_back();
    return fx;
  }

  static void give_back(machine_effects fx) {
    auto& pool = buffers();
    fx.clear();
    if (pool.size() < max_kept && fx.capacity() <= max_capacity)
      pool.push_back(std::move(fx));
  }

private:
  static constexpr std::size_t max_kept = 8;
  static constexpr std::size_t max_capacity = 64;

  static std::vector<machine_effects>& buffers() {
    thread_local std::vector<machine_effects> pool;
    return pool;
  }
};

/// How far an effect reaches, which says how long it waits for the input
/// that caused it to be recorded.
enum class reach : std::uint8_t {
  /// Asks another actor of the node (a slot, a classification, a delay, a
  /// timer): carried out at once; the journal keeps the inputs' order.
  node,
  /// Only tells another part of the node (a slot given back, a breaker fed,
  /// an event): carried out at once, even when the rest of its batch waits.
  notice,
  /// Acts outside the node (an attempt started, adopted or stopped, a hook):
  /// once the input is committed (it survives a crash of the node).
  outside,
  /// Tells someone outside (a delivery, the task's end): once the input is
  /// on disk (it survives a crash of the machine).
  told,
};

template<class T, class... Ts>
inline constexpr bool is_one_of = (std::is_same_v<T, Ts> || ...);

template<class T>
constexpr reach reach_of() {
  using namespace effect;
  // Qualified where a carrier function has the effect's name.
  if constexpr (is_one_of<T, start_attempt, adopt_attempt, stop_attempt,
                          effect::run_preflight, effect::run_gates>)
    return reach::outside;
  else if constexpr (is_one_of<T, deliver, finish>)
    return reach::told;
  else if constexpr (is_one_of<T, release_slot, report_agent, attempt_exited,
                               classified, retry_scheduled, agent_switched,
                               user_stopped, retry_requested, deadline_passed,
                               attempt_timed_out, voluntary_end, close_account,
                               quota_wait, task_paused, task_resumed,
                               not_now_wait>)
    return reach::notice;
  else {
    // A new effect must be placed above.
    static_assert(is_one_of<T, ask_permission, reclaim_slot, classify,
                            ask_delay, set_timer>);
    return reach::node;
  }
}

reach reach_of(const machine_effect& e) {
  return std::visit(
    [](const auto& x) { return reach_of<std::decay_t<decltype(x)>>(); }, e);
}

task_status status_of(supervisor_actor self) {
  auto& st = self->state;
  task_status s;
  s.task_id = st.task_id();
  s.environment = st.opts->task.environment;
  switch (st.m.phase) {
    case task_phase::created:
    case task_phase::waiting:
      s.state = task_state::queued;
      break;
    case task_phase::running:
    case task_phase::classifying:
    case task_phase::delaying:
    case task_phase::preflight:
    case task_phase::gating:
    case task_phase::delivering:
      s.state = task_state::running;
      break;
    case task_phase::backoff:
      s.state = task_state::backoff;
      break;
    case task_phase::done:
      s.state = task_state::done;
      break;
    case task_phase::parked:
      if (st.m.paused) {
        s.state = task_state::paused;
        s.waiting_for = "resume (paused by user)";
      } else if (st.m.not_now) {
        s.state = task_state::not_now;
        s.resume_at = st.m.resume_at_s;
        s.waiting_for = "not now: trying again " +
                        reset_time_text(st.m.resume_at_s, now_s(self));
      } else {
        s.state = task_state::quota_wait;
        s.resume_at = st.m.resume_at_s;
        s.waiting_for = "quota reset of " + st.agent().quota_account() + " " +
                        reset_time_text(st.m.resume_at_s, now_s(self));
      }
      break;
  }
  const auto& c = st.m.counters;
  s.agent_id = st.agent().agent_id;
  s.attempt = st.m.attempt;
  s.retry_count = task_machine::shown_retry_count(st.m);
  s.max_retries = st.machine().config().max_retries_per_agent;
  s.total_attempts = c.total_attempts;
  s.fallback_count = c.fallback_count;
  s.trace_id = st.opts->trace_id;
  return s;
}

/// Drives `in` and answers the request once its effects are carried out.
caf::result<bool> drive_and_reply(supervisor_actor self, machine_input in) {
  if (!self->state.journal)
    return drive(self, std::move(in));
  auto rp = self->make_response_promise<bool>();
  drive(self, std::move(in), [rp](bool ok) mutable { rp.deliver(ok); });
  return rp;
}

supervisor_impl::behavior_type
task_supervisor(supervisor_actor self, task_parent_actor parent,
                std::unique_ptr<const task_settings> opts,
                std::shared_ptr<const shared_settings> node, start_info start) {
  auto& st = self->state;
  st.parent = std::move(parent);
  st.event_batches = start.event_batches;
  st.opts = std::move(opts);
  st.node = std::move(node);
  st.ids.emplace(start.ids);
  st.journal = std::move(start.journal);
  st.journal_seq = start.journal_seq;
  st.task_span = st.ids->span_id();
  st.m = st.machine().initial();
  // A group member's rerun numbers its attempts on from its earlier runs':
  // their directories stay, as does its state directory.
  st.m.attempt = start.attempts_before;
  if (st.opts->hooks) {
    st.run = std::make_unique<hook_run>();
    if (st.opts->hooks->repo)
      st.run->repo = std::make_shared<const runtime::repo_workspace>(
        *st.opts->hooks->repo, st.opts->task.id);
  }
  auto more = std::move(start.more);
  if (!more)
    more = std::make_unique<start_info::extras>();
  // Helpers this supervisor owns go down with it, however it ends.
  if (!more->owned.empty())
    self->attach_functor([owned = std::move(more->owned)](const caf::error&) {
      for (auto& x : owned)
        caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    });
  self->set_down_handler(
    [=](const caf::down_msg& dm) { worker_down(self, dm); });
  // CAF's own handling (a normal exit is ignored, any other ends the
  // actor), with the events it holds sent first (a node shutting down
  // while the classifier is asked).
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (!msg.reason)
      return;
    flush_events(self);
    self->quit(std::move(msg.reason));
  });
  const auto& task = st.opts->task;
  if (start.emit_submitted) {
    std::vector<std::string> ids;
    for (auto& a : *st.node->agents)
      ids.push_back(a.agent_id);
    emit(self, task_submitted_event(st.head(false), task.environment, ids));
  }
  for (auto& w : more->warnings)
    emit(self, warning_event(st.head(false), w));
  if (more->classifier_rules) {
    st.has_own_rules = true;
    self
      ->request(st.node->classifier, caf::infinite, set_rules_atom::value,
                task.id, std::move(*more->classifier_rules))
      .then([](bool) {},
            [=](caf::error& err) {
              drive(self, input::reply_failed{0, request_kind::rules,
                                              error_text(err)});
            });
  }
  if (start.resume)
    resume(self, std::move(start.replay));
  else
    drive(self, input::start{});
  return {
    [=](deadline_atom) {
      drive(self, input::timer{timer_kind::deadline, 0});
    },
    [=](attempt_exited_atom, attempt_report& r) { worker_reported(self, r); },
    [=](start_atom, int attempt, std::string& runtime_id) {
      // The worker's attempt runs under this pid / container id: journaled,
      // so that a restarted node can adopt it.
      auto& st = self->state;
      if (!from_worker(self) || !st.journal)
        return;
      drive(self, input::attempt_started{
                    attempt, journaled_runtime_id(st, std::move(runtime_id))});
    },
    [=](event_atom, event& ev) {
      // Worker events (attempt_started, log) pass through in order; only
      // the current worker's, about this task.
      if (!from_worker(self) || ev.task_id != self->state.task_id())
        return;
      emit(self, std::move(ev));
    },
    [=](backoff_timer_atom, std::uint64_t gen) {
      drive(self, input::timer{timer_kind::backoff, gen});
    },
    [=](worker_gone_atom, int attempt) { worker_gone(self, attempt); },
    [=](attempt_timer_atom, std::uint64_t gen) {
      drive(self, input::timer{timer_kind::attempt, gen});
    },
    [=](quota_timer_atom, std::uint64_t gen) {
      drive(self, input::timer{timer_kind::quota, gen});
    },
    [=](ws_done_atom, std::uint64_t id) {
      if (auto reply = self->state.run ? self->state.run->replies->take(id)
                                       : workspace_fn{})
        reply();
    },
    [=](stop_atom, stop_mode mode) {
      return drive_and_reply(self, input::stop{mode == stop_mode::kill
                                                 ? stop_request::kill
                                                 : stop_request::cancel});
    },
    [=](retry_now_atom) { return drive_and_reply(self, input::retry_now{}); },
    [=](pause_atom) { return drive_and_reply(self, input::pause{}); },
    [=](resume_atom) { return drive_and_reply(self, input::resume{}); },
    [=](force_fallback_atom) {
      return drive_and_reply(self, input::force_fallback{});
    },
    [=](status_atom) { return status_of(self); },
  };
}

} // namespace

void emit(supervisor_actor self, event ev) {
  auto& st = self->state;
  if (st.event_batches && (st.driving > 0 || st.asking > 0)) {
    st.outbox.push_back(std::move(ev));
    return;
  }
  // The outbox is empty here: it is flushed whenever neither count is up.
  self->send(st.parent, event_atom::value, std::move(ev));
}

void flush_events(supervisor_actor self) {
  auto& st = self->state;
  if (st.outbox.empty())
    return;
  if (st.outbox.size() == 1)
    self->send(st.parent, event_atom::value, std::move(st.outbox.front()));
  else
    self->send(st.parent, event_atom::value, std::move(st.outbox));
  st.outbox.clear();
}

void carry(supervisor_actor self, const machine_effects& fx) {
  // A vector, which allocates only when an input is produced (rarely): an
  // empty std::deque allocates twice, and this runs several times per
  // attempt.
  std::vector<machine_input> next;
  for (auto& e : fx)
    std::visit(carrier{self, next}, e);
  for (auto& in : next)
    drive(self, std::move(in));
}

/// Feeds `in` to the machine and carries out its effects (and the inputs
/// they produce at once). With a journal, `in` is recorded first. Effects
/// that stay inside the node (a slot request, a classification, a timer,
/// an event) are carried out at once: the journal keeps the inputs in the
/// order this actor sends them and commits them in that order, so a later
/// recorded input implies every earlier one (a started attempt's pid or
/// container id, too, is committed before its end is). Effects that reach
/// outside wait until `in` is committed; a control request's reply and what
/// tells someone outside wait until it is on disk. The supervisor handles
/// nothing else meanwhile.
/// Returns whether `in` took effect; `then` runs after its effects.
bool drive(supervisor_actor self, machine_input in, after_input then) {
  auto& st = self->state;
  // The events of this input (and of those it produces at once) go in one
  // message once nothing more of the attempt's judging is out.
  struct batch_scope {
    supervisor_actor self;
    explicit batch_scope(supervisor_actor s) : self(s) {
      ++self->state.driving;
    }
    ~batch_scope() {
      if (--self->state.driving == 0 && self->state.asking == 0)
        flush_events(self);
    }
    batch_scope(const batch_scope&) = delete;
    batch_scope& operator=(const batch_scope&) = delete;
  } scope{self};
  auto fx = effect_buffers::take();
  auto now = now_s(self);
  auto ok = st.machine().handle(st.m, in, now, fx);
  if (!ok || !st.journal) {
    carry(self, fx);
    effect_buffers::give_back(std::move(fx));
    if (then)
      then(ok);
    return ok;
  }
  auto furthest = reach::node;
  for (auto& e : fx)
    furthest = std::max(furthest, reach_of(e));
  auto hold = then || furthest >= reach::outside;
  if (!hold) {
    // A failed write is retried by the journal; nothing waits for it.
    self->send(st.journal, jrecord_atom::value, st.journal_seq, ++st.journal_n,
               encode(journaled_input{now, std::move(in)}));
    carry(self, fx);
    effect_buffers::give_back(std::move(fx));
    return true;
  }
  // Notifications inside the node (the slot given back, the breaker fed,
  // events) go at once: another task may use the slot while this one's end
  // is being recorded. They produce no input of their own.
  auto pending = std::make_shared<machine_effects>();
  machine_effects early;
  for (auto& e : fx)
    (reach_of(e) == reach::notice ? early : *pending).push_back(std::move(e));
  effect_buffers::give_back(std::move(fx));
  carry(self, early);
  auto go_on = [self, pending, then] {
    carry(self, *pending);
    if (then)
      then(true);
  };
  auto durable = static_cast<bool>(then) || furthest == reach::told;
  self
    ->request(st.journal, caf::infinite, jinput_atom::value, st.journal_seq,
              ++st.journal_n, encode(journaled_input{now, std::move(in)}),
              durable)
    .await([go_on](bool) { go_on(); },
           // The journal is gone: the node is shutting down.
           [go_on](caf::error&) { go_on(); });
  return true;
}

/// The attempt ended: the machine keeps what judging needs, the carrier the
/// output tail for the classifier.
} // namespace tasksup::detail

namespace tasksup {

task_supervisor_actor spawn_task_supervisor(caf::actor_system& sys,
                                            task_parent_actor parent,
                                            supervisor_options opts) {
  auto setup = detail::make_setup(sys, std::move(opts));
  return sys.spawn(detail::task_supervisor, std::move(parent),
                   std::move(setup.settings), std::move(setup.node),
                   std::move(setup.start));
}

} // namespace tasksup

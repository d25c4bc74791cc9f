#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/container_worker_actor.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/shared_pool.hpp"

#include "tasksup/supervisor/agent_chain.hpp"
#include "tasksup/supervisor/hash.hpp"
#include "tasksup/supervisor/supervision_policy.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

/// What the supervisor is waiting for.
enum class phase {
  /// Not started yet.
  idle,
  /// Waiting for an attempt slot from the node services.
  queued,
  /// Asking whether the agent's circuit breaker lets an attempt through.
  checking,
  /// An attempt is running.
  running,
  /// The attempt ended; waiting for classification, a retry token or a
  /// delay.
  judging,
  /// Waiting out the backoff delay.
  backoff,
  /// Finished; the result was escalated.
  done,
};

/// A task's own settings that never change once its supervisor runs: the
/// task fields every attempt is built from. Built once, by the spawning
/// thread, and only read afterwards. Memory per parked task (BENCHMARKS.md
/// §2): the task's start-only inputs (selection, default agent, classifier
/// rules) are not kept, and what tasks have in common is in `shared_settings`.
struct task_settings {
  /// The fields of the task_spec that attempts and status use.
  struct task_fields {
    std::string id;
    std::string prompt;
    std::string environment;
    std::string image;
    std::map<std::string, std::string> env;
    std::vector<mount_spec> mounts;
    std::string workdir;
    std::optional<std::uint64_t> memory_limit_mb;
  };
  task_fields task;
  std::string trace_id;
};

/// What the tasks of a node usually have in common: the supervision policy
/// (its settings), the agent chain, the runtime, the actors they ask and the
/// attempt root. One block per distinct combination, shared between the
/// tasks that have it (a task with its own overrides or helpers gets its
/// own).
struct shared_settings {
  /// Applies `cfg`.
  explicit shared_settings(std::shared_ptr<const supervisor_config> cfg)
    : policy(std::move(cfg)) {}

  supervision_policy policy;
  std::shared_ptr<const std::vector<agent_spec>> agents;
  std::shared_ptr<runtime::container_runtime> runtime;
  caf::actor classifier;
  caf::actor backoff;
  caf::actor services;
  std::string attempt_root;
};

/// What the supervisor needs only while it starts.
struct start_info {
  /// The rarely present start-only inputs, behind one pointer.
  struct extras {
    /// Problems found while building the agent chain.
    std::vector<std::string> warnings;
    /// The task's own classifier rules, handed to the classifier at start.
    std::optional<std::vector<classifier_rule>> classifier_rules;
    /// Helpers spawned for this supervisor alone (stopped when it ends).
    std::vector<caf::actor> owned;
  };
  /// Null when there are none.
  std::unique_ptr<extras> more;
  /// Already past the trace id, when that was generated.
  trace_id_generator ids{0};
  bool emit_submitted = true;
};

/// A span id held inline: 16 hex digits (W3C trace context) are one more
/// than a std::string holds without allocating.
class span_text {
public:
  /// Takes `id` (at most 16 characters, as `trace_id_generator` makes them).
  span_text& operator=(std::string_view id) {
    size_ = static_cast<std::uint8_t>(std::min(id.size(), chars_.size()));
    id.copy(chars_.data(), size_);
    return *this;
  }

  /// The id as text (what `event_head::span_id` is assigned from).
  operator std::string_view() const { return {chars_.data(), size_}; }

private:
  std::array<char, 16> chars_{};
  std::uint8_t size_ = 0;
};

struct supervisor_state {
  caf::actor parent;
  /// Set once at start, never null afterwards.
  std::unique_ptr<const task_settings> opts;
  /// Set once at start, never null afterwards.
  std::shared_ptr<const shared_settings> node;
  /// `&node->policy`.
  const supervision_policy* policy = nullptr;
  supervision_state st;
  std::optional<trace_id_generator> ids;
  /// The span of events outside attempts (submission, end of the task).
  span_text task_span;
  /// The span of the current attempt.
  span_text span;
  int attempt = 0;
  phase ph = phase::idle;
  bool holds_slot = false;
  std::optional<stop_mode> stop_requested;
  bool fallback_requested = false;
  /// The task's deadline passed while an attempt ran; its exit ends the task.
  bool deadline_passed = false;
  /// The task brought its own classifier rules (dropped when it ends). The
  /// rules themselves are handed to the classifier at start, not kept here.
  bool has_own_rules = false;
  caf::actor worker;
  /// Invalidates pending timers and replies (stop, retry_now, fallback).
  std::uint64_t generation = 0;
  double previous_delay_s = 0;
  /// What the result takes from the last attempt's outcome: its exit code
  /// (nullopt before the first attempt ended) and artifacts. The rest of the
  /// outcome (its output tail) is not kept while the task waits.
  std::optional<int> last_exit_code;
  std::vector<std::string> last_artifacts;
  static inline const char* name = "tasksup.task_supervisor";

  const agent_spec& agent() const { return (*node->agents)[st.agent_index]; }

  const std::string& task_id() const { return opts->task.id; }

  event_head head(bool in_attempt = true) const {
    event_head h;
    h.task_id = opts->task.id;
    h.attempt = attempt;
    h.trace_id = opts->trace_id;
    h.span_id = in_attempt && attempt > 0 ? span : task_span;
    h.ts = wall_clock_s();
    return h;
  }
};

using supervisor_actor = caf::stateful_actor<supervisor_state>;

/// Hashes settings consistently with `same_settings`.
struct config_hash {
  std::size_t operator()(const supervisor_config& cfg) const noexcept {
    return settings_hash(cfg);
  }
};

/// Settings that behave identically (`same_settings`).
struct config_equal {
  bool operator()(const supervisor_config& a,
                  const supervisor_config& b) const noexcept {
    return same_settings(a, b);
  }
};

/// Hashes an agent chain over every field of every agent.
struct agents_hash {
  std::size_t operator()(const std::vector<agent_spec>& agents) const {
    std::hash<std::string> str;
    std::size_t h = agents.size();
    auto mix = [&h](std::size_t x) { hash_combine(h, x); };
    for (auto& a : agents) {
      mix(str(a.agent_id));
      mix(str(a.agent_cli));
      mix(str(a.config_dir));
      mix(str(a.cli_flags));
      for (auto& arg : a.args)
        mix(str(arg));
      mix(a.prompt_as_argument ? 1 : 0);
    }
    return h;
  }
};

/// The task's supervision settings, shared with every live task that has
/// exactly the same ones (most tasks of a node use their environment's).
std::shared_ptr<const supervisor_config> shared_config(supervisor_config cfg) {
  static shared_pool<supervisor_config, config_hash, config_equal> pool;
  return pool.share(std::move(cfg));
}

/// The agent chain, shared with every live task that has the same one.
std::shared_ptr<const std::vector<agent_spec>>
shared_agents(std::vector<agent_spec> agents) {
  static shared_pool<std::vector<agent_spec>, agents_hash,
                     std::equal_to<std::vector<agent_spec>>>
    pool;
  return pool.share(std::move(agents));
}

/// Hashes the identities of what `shared_settings_equal` compares.
struct shared_settings_hash {
  std::size_t operator()(const shared_settings& x) const {
    std::hash<const void*> ptr;
    std::size_t h = std::hash<std::string>{}(x.attempt_root);
    auto mix = [&h](std::size_t v) { hash_combine(h, v); };
    mix(ptr(&x.policy.config()));
    mix(ptr(x.agents.get()));
    mix(ptr(x.runtime.get()));
    for (auto* a : {&x.classifier, &x.backoff, &x.services})
      mix(ptr(caf::actor_cast<caf::abstract_actor*>(*a)));
    return h;
  }
};

/// The same policy settings, chain, runtime and actors (by identity) and
/// the same attempt root.
struct shared_settings_equal {
  bool operator()(const shared_settings& a, const shared_settings& b) const {
    // The settings and the chain come from their pools, so equal ones are
    // the same objects.
    return &a.policy.config() == &b.policy.config() && a.agents == b.agents &&
           a.runtime == b.runtime && a.classifier == b.classifier &&
           a.backoff == b.backoff && a.services == b.services &&
           a.attempt_root == b.attempt_root;
  }
};

/// What the task has in common with others, shared with every live task
/// that has the same.
std::shared_ptr<const shared_settings> shared_node(shared_settings x) {
  static shared_pool<shared_settings, shared_settings_hash,
                     shared_settings_equal>
    pool;
  return pool.share(std::move(x));
}

double now_s(supervisor_actor* self) {
  using namespace std::chrono;
  return duration<double>(self->clock().now().time_since_epoch()).count();
}

void emit(supervisor_actor* self, event ev) {
  self->send(self->state.parent, event_atom::value, std::move(ev));
}

void begin_attempt(supervisor_actor* self);
std::string deadline_reason(supervisor_actor* self);
/// Carries out a policy decision; `from` is the agent before the policy
/// call (the decision may already have moved the task to the next agent).
void act(supervisor_actor* self, decision d, std::optional<classification> cls,
         const std::string& from);

void release_slot(supervisor_actor* self) {
  auto& st = self->state;
  if (st.node->services && (st.holds_slot || st.ph == phase::queued))
    self->send(st.node->services, release_atom::value, st.task_id());
  st.holds_slot = false;
}

void finish(supervisor_actor* self, task_outcome outcome,
            std::optional<std::string> error) {
  auto& st = self->state;
  if (st.ph == phase::done)
    return;
  release_slot(self);
  st.ph = phase::done;
  ++st.generation;
  task_result r;
  r.task_id = st.task_id();
  r.outcome = outcome;
  if (st.last_exit_code) {
    r.exit_code = *st.last_exit_code;
    r.artifacts = std::move(st.last_artifacts);
  }
  r.error = std::move(error);
  r.metadata.agent_used = st.agent().agent_cli;
  r.metadata.agent_id = st.agent().agent_id;
  r.metadata.retry_count = st.st.retry_count;
  r.metadata.total_attempts = st.st.total_attempts;
  r.metadata.fallback_count = st.st.fallback_count;
  emit(self, task_done_event(st.head(false), r));
  if (st.has_own_rules)
    self->send(st.node->classifier, drop_rules_atom::value, st.task_id());
  self->send(st.parent, escalate_atom::value, r);
  emit(self, escalated_event(st.head(false), outcome,
                             caf::to_string(st.parent.address())));
  self->quit();
}

void fail(supervisor_actor* self, std::string reason) {
  finish(self, task_outcome::failed, std::move(reason));
}

/// Ends the task because of a user stop outside a running attempt.
void stop_now(supervisor_actor* self, stop_mode mode, const char* message) {
  emit(self, user_stop_event(self->state.head(), mode, message));
  finish(self, task_outcome::stopped,
         "stopped by user (" + std::string{to_string(mode)} + ")");
}

void start_worker(supervisor_actor* self) {
  auto& st = self->state;
  if (auto denied = st.policy->start_attempt(st.st)) {
    fail(self, *denied);
    return;
  }
  ++st.attempt;
  st.span = st.ids->span_id();
  const auto& task = st.opts->task;
  const auto& agent = st.agent();
  worker_options w;
  apply_agent_options(w, agent);
  auto& spec = w.spec;
  spec.task_id = task.id;
  spec.attempt = st.attempt;
  spec.agent_id = agent.agent_id;
  spec.argv.push_back(agent.agent_cli);
  spec.argv.insert(spec.argv.end(), agent.args.begin(), agent.args.end());
  spec.env = task.env;
  if (agent.prompt_as_argument)
    spec.argv.push_back(task.prompt);
  else
    spec.env["TASKSUP_PROMPT"] = task.prompt;
  // <attempt_root>/<task id>/attempt-<n>, joined as text: task ids are
  // validated path components, and std::filesystem::path costs ~2k
  // instructions per attempt here (BENCHMARKS.md §1).
  const auto& root = st.node->attempt_root;
  spec.attempt_dir.reserve(root.size() + task.id.size() + 20);
  spec.attempt_dir = root;
  if (!root.empty() && root.back() != '/')
    spec.attempt_dir += '/';
  spec.attempt_dir += task.id;
  spec.attempt_dir += "/attempt-";
  spec.attempt_dir += std::to_string(st.attempt);
  spec.workdir = task.workdir;
  for (auto& m : task.mounts)
    spec.mounts.push_back({m.host_path, m.container_path, m.read_only});
  spec.config_dir = agent.config_dir;
  spec.memory_limit_mb = task.memory_limit_mb;
  spec.image = task.image;
  spec.labels["tasksup.task_id"] = task.id;
  spec.labels["tasksup.attempt"] = std::to_string(st.attempt);
  spec.labels["tasksup.agent_id"] = agent.agent_id;
  spec.labels["tasksup.trace_id"] = st.opts->trace_id;
  w.runtime = st.node->runtime;
  w.trace_id = st.opts->trace_id;
  w.span_id = std::string_view{st.span};
  w.agent_cli = agent.agent_cli;
  st.ph = phase::running;
  st.worker = spawn_container_worker(self, caf::actor_cast<caf::actor>(self),
                                     std::move(w));
  self->monitor(st.worker);
}

/// Asks the agent's circuit breaker, then starts.
void check_agent(supervisor_actor* self) {
  auto& st = self->state;
  if (st.st.total_attempts >= st.policy->config().max_total_attempts) {
    // start_attempt refuses and says why.
    auto denied = st.policy->start_attempt(st.st);
    fail(self, denied ? *denied : "max_total_attempts reached");
    return;
  }
  if (!st.node->services) {
    start_worker(self);
    return;
  }
  st.ph = phase::checking;
  auto gen = st.generation;
  self
    ->request(st.node->services, caf::infinite, agent_ok_atom::value,
              st.agent().agent_id)
    .then(
      [=](bool allowed) {
        auto& st = self->state;
        if (st.ph != phase::checking || gen != st.generation)
          return;
        if (allowed) {
          start_worker(self);
          return;
        }
        auto from = st.agent().agent_id;
        auto d =
          st.policy->skip_agent(st.st, "circuit breaker open for " + from);
        act(self, std::move(d), std::nullopt, from);
      },
      [=](caf::error&) {
        // No node services: run without them rather than stall.
        auto& st = self->state;
        if (st.ph == phase::checking && gen == st.generation)
          start_worker(self);
      });
}

void begin_attempt(supervisor_actor* self) {
  auto& st = self->state;
  if (!st.node->services || st.holds_slot) {
    check_agent(self);
    return;
  }
  st.ph = phase::queued;
  auto gen = st.generation;
  self
    ->request(st.node->services, caf::infinite, slot_atom::value, st.task_id())
    .then(
      [=](slot_atom) {
        auto& st = self->state;
        if (st.ph != phase::queued || gen != st.generation) {
          // Granted after we stopped waiting: give it back.
          if (st.ph != phase::queued)
            self->send(st.node->services, release_atom::value, st.task_id());
          return;
        }
        st.holds_slot = true;
        check_agent(self);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (st.ph == phase::queued && gen == st.generation)
          fail(self, "no attempt slot: " + error_text(err));
      });
}

void schedule_retry(supervisor_actor* self, const decision& d,
                    std::optional<classification> cls) {
  auto& st = self->state;
  if (!d.backoff_class) {
    // A permanent task restarting after exit 0: no delay.
    begin_attempt(self);
    return;
  }
  delay_request req;
  req.retry_index = d.retry_count - 1;
  req.cls = *d.backoff_class;
  req.previous_s = st.previous_delay_s;
  // Only a rate-limit message's "come back in N s" sets the delay; other
  // output that happens to mention a retry is not trusted for timing.
  if (cls && cls->cls == error_class::rate_limit)
    req.hint_s = cls->retry_after_s;
  const auto& cfg = st.policy->config();
  req.backoff_base_s = cfg.backoff_base_seconds;
  req.rate_limit_base_s = cfg.rate_limit_backoff_base;
  req.overrides = cfg.backoff;
  st.ph = phase::judging;
  auto gen = st.generation;
  auto retry_count = d.retry_count;
  self->request(st.node->backoff, caf::infinite, delay_atom::value, req)
    .then(
      [=](double delay_s) {
        auto& st = self->state;
        if (st.ph != phase::judging || gen != st.generation)
          return;
        st.previous_delay_s = delay_s;
        emit(self,
             retry_scheduled_event(st.head(), retry_count,
                                   st.policy->config().max_retries_per_agent,
                                   st.agent().agent_id, delay_s));
        st.ph = phase::backoff;
        auto timer_gen = ++st.generation;
        if (delay_s <= 0) {
          // No delay: start now rather than through a message to ourselves
          // (one mailbox round trip less per immediate retry).
          begin_attempt(self);
          return;
        }
        auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(delay_s));
        self->delayed_send(self, delay, backoff_timer_atom::value, timer_gen);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (st.ph == phase::judging && gen == st.generation)
          fail(self, "backoff unavailable: " + error_text(err));
      });
}

void act(supervisor_actor* self, decision d, std::optional<classification> cls,
         const std::string& from) {
  auto& st = self->state;
  switch (d.step) {
    case next_step::succeed:
      finish(self, task_outcome::succeeded, std::nullopt);
      return;
    case next_step::fail:
      fail(self, d.reason);
      return;
    case next_step::switch_agent:
      emit(self, agent_switched_event(st.head(), from, st.agent().agent_id,
                                      d.reason));
      begin_attempt(self);
      return;
    case next_step::retry:
      if (!st.node->services) {
        schedule_retry(self, d, std::move(cls));
        return;
      }
      st.ph = phase::judging;
      {
        auto gen = st.generation;
        self
          ->request(st.node->services, caf::infinite, retry_token_atom::value,
                    st.task_id())
          .then(
            [=](bool granted) {
              auto& st = self->state;
              if (st.ph != phase::judging || gen != st.generation)
                return;
              if (granted) {
                schedule_retry(self, d, cls);
                return;
              }
              auto from = st.agent().agent_id;
              act(self, st.policy->on_retry_denied(st.st), std::nullopt, from);
            },
            [=](caf::error&) {
              auto& st = self->state;
              if (st.ph == phase::judging && gen == st.generation)
                schedule_retry(self, d, cls);
            });
      }
      return;
  }
}

/// Judges an attempt's end (a report, or the worker's death).
void on_attempt_end(supervisor_actor* self, attempt_outcome out) {
  auto& st = self->state;
  st.ph = phase::judging;
  st.worker = nullptr;
  release_slot(self);
  emit(self, attempt_exited_event(st.head(), out));
  st.last_exit_code = out.exit_code;
  st.last_artifacts = out.artifacts;
  if (st.stop_requested) {
    finish(self, task_outcome::stopped,
           "stopped by user (" + std::string{to_string(*st.stop_requested)} +
             ")");
    return;
  }
  if (st.deadline_passed) {
    fail(self, deadline_reason(self));
    return;
  }
  auto from = st.agent().agent_id;
  if (st.fallback_requested) {
    st.fallback_requested = false;
    act(self, st.policy->skip_agent(st.st, "fallback forced by user"),
        std::nullopt, from);
    return;
  }
  if (out.succeeded()) {
    if (st.node->services)
      self->send(st.node->services, agent_result_atom::value, from, true);
    act(self, st.policy->on_exit(st.st, out, std::nullopt, now_s(self)),
        std::nullopt, from);
    return;
  }
  classify_request req;
  req.task_id = st.task_id();
  // Only the classifier reads the output: the request takes the tail, and
  // `out`, which both reply handlers capture, goes on without it (else a
  // backlog at the classifier holds three copies of each waiting task's).
  auto tail = std::move(out.tail);
  req.outcome = out;
  req.outcome.tail = std::move(tail);
  req.agent_cli = st.agent().agent_cli;
  auto gen = st.generation;
  self
    ->request(st.node->classifier, caf::infinite, classify_atom::value,
              std::move(req))
    .then(
      [=](classification& c) {
        auto& st = self->state;
        if (st.ph != phase::judging || gen != st.generation)
          return;
        emit(self, classified_event(st.head(), c));
        // Fatal failures say nothing about the agent's health (a bad key).
        if (st.node->services && c.cls != error_class::fatal)
          self->send(st.node->services, agent_result_atom::value, from, false);
        auto d = st.policy->on_exit(st.st, out, c, now_s(self));
        act(self, std::move(d), std::move(c), from);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (st.ph != phase::judging || gen != st.generation)
          return;
        // Without a classifier the failure is treated as transient.
        classification c;
        c.cls = error_class::retryable;
        c.rule = "classifier_unavailable";
        c.line = error_text(err);
        emit(self, classified_event(st.head(), c));
        auto d = st.policy->on_exit(st.st, out, c, now_s(self));
        act(self, std::move(d), std::move(c), from);
      });
}

/// Tells the running attempt's worker to stop: at once for a kill, with the
/// policy's `stop_grace_s` before the kill for a cancel.
void stop_worker(supervisor_actor* self, stop_mode mode) {
  auto& st = self->state;
  std::int64_t grace_ms = 0;
  if (mode == stop_mode::cancel)
    grace_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(st.policy->config().stop_grace_s))
        .count();
  self->send(st.worker, stop_atom::value, mode, grace_ms);
}

std::string deadline_reason(supervisor_actor* self) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "deadline exceeded (%g s)",
                self->state.policy->config().deadline_s.value_or(0));
  return buf;
}

/// The task's optional deadline (SPEC §5, off unless set) is up: a running
/// attempt is cancelled gracefully and its exit fails the task; anywhere
/// else the task fails at once. Retry and fallback are bypassed.
void on_deadline(supervisor_actor* self) {
  auto& st = self->state;
  if (st.ph == phase::done || st.deadline_passed)
    return;
  st.deadline_passed = true;
  emit(self, warning_event(st.head(), deadline_reason(self) +
                                        (st.ph == phase::running
                                           ? ": stopping the attempt"
                                           : ": no further attempt")));
  if (st.ph == phase::running) {
    if (st.stop_requested)
      return; // already stopping; the user's stop decides the outcome
    stop_worker(self, stop_mode::cancel);
    return;
  }
  // Whatever was pending (a slot, a reply, a backoff timer) is superseded.
  ++st.generation;
  fail(self, deadline_reason(self));
}

bool on_stop(supervisor_actor* self, stop_mode mode) {
  auto& st = self->state;
  switch (st.ph) {
    case phase::done:
      return false;
    case phase::running:
      if (st.stop_requested) {
        // A kill after a cancel escalates; anything else is a repeat.
        if (mode != stop_mode::kill || *st.stop_requested == stop_mode::kill)
          return true;
      }
      st.stop_requested = mode;
      emit(self,
           user_stop_event(st.head(), mode,
                           mode == stop_mode::kill ? "user_kill requested"
                                                   : "user_cancel requested"));
      stop_worker(self, mode);
      return true;
    case phase::backoff:
    case phase::judging:
      stop_now(self, mode, "retry skipped due to user stop");
      return true;
    case phase::idle:
    case phase::queued:
    case phase::checking:
      stop_now(self, mode,
               mode == stop_mode::kill ? "user_kill requested"
                                       : "user_cancel requested");
      return true;
  }
  return false;
}

bool on_retry_now(supervisor_actor* self) {
  auto& st = self->state;
  if (st.ph != phase::backoff)
    return false;
  ++st.generation;
  begin_attempt(self);
  return true;
}

bool on_force_fallback(supervisor_actor* self) {
  auto& st = self->state;
  switch (st.ph) {
    case phase::done:
    case phase::idle:
      return false;
    case phase::running:
      if (st.stop_requested)
        return false;
      // Stop the attempt; its exit then moves to the next agent.
      st.fallback_requested = true;
      stop_worker(self, stop_mode::cancel);
      return true;
    case phase::queued:
    case phase::checking:
    case phase::judging:
    case phase::backoff: {
      // Whatever was pending (a slot grant keeps the slot) is superseded.
      ++st.generation;
      if (st.ph == phase::queued)
        release_slot(self);
      auto from = st.agent().agent_id;
      act(self, st.policy->skip_agent(st.st, "fallback forced by user"),
          std::nullopt, from);
      return true;
    }
  }
  return false;
}

task_status status_of(supervisor_actor* self) {
  auto& st = self->state;
  task_status s;
  s.task_id = st.task_id();
  s.environment = st.opts->task.environment;
  switch (st.ph) {
    case phase::idle:
    case phase::queued:
      s.state = task_state::queued;
      break;
    case phase::checking:
    case phase::running:
    case phase::judging:
      s.state = task_state::running;
      break;
    case phase::backoff:
      s.state = task_state::backoff;
      break;
    case phase::done:
      s.state = task_state::done;
      break;
  }
  s.agent_id = st.agent().agent_id;
  s.attempt = st.attempt;
  s.retry_count = st.st.retry_count;
  s.max_retries = st.policy->config().max_retries_per_agent;
  s.total_attempts = st.st.total_attempts;
  s.fallback_count = st.st.fallback_count;
  s.trace_id = st.opts->trace_id;
  return s;
}

caf::behavior task_supervisor_actor(supervisor_actor* self, caf::actor parent,
                                    std::unique_ptr<const task_settings> opts,
                                    std::shared_ptr<const shared_settings> node,
                                    start_info start) {
  auto& st = self->state;
  st.parent = std::move(parent);
  st.opts = std::move(opts);
  st.node = std::move(node);
  st.policy = &st.node->policy;
  st.ids.emplace(start.ids);
  st.task_span = st.ids->span_id();
  st.st = st.policy->initial_state(st.node->agents->size());
  auto more = std::move(start.more);
  if (!more)
    more = std::make_unique<start_info::extras>();
  // Helpers this supervisor owns go down with it, however it ends.
  if (!more->owned.empty())
    self->attach_functor([owned = std::move(more->owned)](const caf::error&) {
      for (auto& x : owned)
        caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (!st.worker || dm.source != st.worker.address())
      return;
    // The worker died without reporting its exit: the machinery failed.
    attempt_outcome out;
    out.exit_code = -1;
    out.infrastructure_error =
      "container worker died: " + self->system().render(dm.reason);
    on_attempt_end(self, std::move(out));
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
              auto& st = self->state;
              if (st.ph != phase::done)
                fail(self, "invalid classifier rules: " + error_text(err));
            });
  }
  if (auto deadline = st.policy->config().deadline_s; deadline && *deadline > 0)
    self->delayed_send(self,
                       std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::duration<double>(*deadline)),
                       deadline_atom::value);
  begin_attempt(self);
  return {
    [=](deadline_atom) { on_deadline(self); },
    [=](attempt_exited_atom, attempt_report& r) {
      auto& st = self->state;
      if (st.ph != phase::running || r.attempt != st.attempt)
        return;
      self->demonitor(st.worker);
      on_attempt_end(self, std::move(r.outcome));
    },
    [=](event_atom, event& ev) {
      // Worker events (attempt_started, log) pass through in order.
      self->send(self->state.parent, event_atom::value, std::move(ev));
    },
    [=](backoff_timer_atom, std::uint64_t gen) {
      auto& st = self->state;
      if (st.ph == phase::backoff && gen == st.generation)
        begin_attempt(self);
    },
    [=](stop_atom, stop_mode mode) { return on_stop(self, mode); },
    [=](retry_now_atom) { return on_retry_now(self); },
    [=](force_fallback_atom) { return on_force_fallback(self); },
    [=](status_atom) { return status_of(self); },
  };
}

} // namespace

caf::actor spawn_task_supervisor(caf::actor_system& sys, caf::actor parent,
                                 supervisor_options opts) {
  // What a running supervisor keeps is built here, on the spawning thread:
  // the task's own settings in one block, what it has in common with other
  // tasks from the pools. The start-only inputs travel separately and are
  // dropped once the supervisor has started (BENCHMARKS.md §2).
  auto& task = opts.task;
  start_info start;
  start.ids = trace_id_generator{opts.seed};
  start.emit_submitted = opts.emit_submitted;
  start_info::extras more;
  auto chain =
    build_agent_chain(task.selection, opts.default_agent, opts.start_agent_id);
  more.warnings = std::move(chain.warnings);
  more.classifier_rules = std::move(task.classifier_rules);
  if (!opts.backoff) {
    opts.backoff = spawn_backoff(sys, opts.seed);
    more.owned.push_back(opts.backoff);
  }
  if (!opts.classifier) {
    if (auto rules = classifier::make(default_classifier_rules())) {
      opts.classifier = spawn_classifier(sys, std::move(*rules));
      more.owned.push_back(opts.classifier);
    }
  }
  if (!more.warnings.empty() || more.classifier_rules || !more.owned.empty())
    start.more = std::make_unique<start_info::extras>(std::move(more));
  shared_settings node{shared_config(std::move(task.supervisor))};
  node.agents = shared_agents(std::move(chain.agents));
  node.runtime = std::move(opts.runtime);
  node.classifier = std::move(opts.classifier);
  node.backoff = std::move(opts.backoff);
  node.services = std::move(opts.services);
  node.attempt_root =
    opts.attempt_root.empty()
      ? (std::filesystem::temp_directory_path() / "tasksup").string()
      : std::move(opts.attempt_root);
  auto settings = std::make_unique<task_settings>();
  settings->trace_id =
    opts.trace_id.empty() ? start.ids.trace_id() : std::move(opts.trace_id);
  // The generator's string grew while it was built; it is kept for the
  // task's lifetime.
  settings->trace_id.shrink_to_fit();
  auto& fields = settings->task;
  fields.id = std::move(task.id);
  fields.prompt = std::move(task.prompt);
  fields.environment = std::move(task.environment);
  fields.image = std::move(task.image);
  fields.env = std::move(task.env);
  fields.mounts = std::move(task.mounts);
  fields.workdir = std::move(task.workdir);
  fields.memory_limit_mb = task.memory_limit_mb;
  return sys.spawn(task_supervisor_actor, std::move(parent),
                   std::unique_ptr<const task_settings>{std::move(settings)},
                   shared_node(std::move(node)), std::move(start));
}

} // namespace tasksup

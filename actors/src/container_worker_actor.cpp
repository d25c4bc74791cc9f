#include "tasksup/actors/container_worker_actor.hpp"

#include "tasksup/actors/actor_timer.hpp"
#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/output_parser.hpp"

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tasksup {

namespace {

/// What an attempt the node could not take over after its restart was lost
/// with (`attempt_outcome::lost_node`; its rule reads `node_lost:this
/// node`).
constexpr std::string_view restarted_node_name = "this node";

/// Longest noise line kept to name an `idle_noise` stop.
constexpr std::size_t noise_line_bytes = 512;

/// Output lines on their way from the runtime's thread to the worker's
/// mailbox, counted in bytes (each line also pays `line_cost`): above
/// `high` the runtime stops reading the attempt's pipes; the worker resumes
/// it once it has worked the count down to `low`. A fast agent then waits on
/// its pipe, as on a slow terminal, and the mailbox stays small.
struct output_credit {
  static constexpr std::int64_t line_cost = 128;
  static constexpr std::int64_t high = 256 * 1024;
  static constexpr std::int64_t low = 64 * 1024;

  std::atomic<std::int64_t> bytes{0};
  std::atomic<bool> paused{false};

  static std::int64_t cost(std::size_t line_size) {
    return static_cast<std::int64_t>(line_size) + line_cost;
  }

  /// Runtime side, a line was sent: false when the runtime should pause.
  bool sent(std::int64_t n) {
    if (bytes.fetch_add(n) + n <= high)
      return true;
    paused.store(true);
    // The worker may have drained everything before it could see `paused`:
    // then nobody would resume, so take the pause back here and go on.
    return bytes.load() <= low && paused.exchange(false);
  }

  /// Worker side, a line was handled: true when the runtime must resume.
  bool received(std::int64_t n) {
    return bytes.fetch_sub(n) - n <= low && paused.load() &&
           paused.exchange(false);
  }
};

/// The running attempt's handle, shared with the functor that kills it
/// when the worker ends however it ends (attached once, for every attempt a
/// kept worker runs).
struct handle_slot {
  std::shared_ptr<runtime::attempt_handle> handle;
};

struct worker_state {
  worker_options opts;
  attempt_owner_actor supervisor;
  /// Set when its node stops: the outcome says the attempt was lost there.
  std::string lost_with_node;
  /// The running attempt's handle, in a slot the kill-on-exit functor
  /// shares (it outlives the state).
  std::shared_ptr<handle_slot> slot = std::make_shared<handle_slot>();
  std::size_t log_events = 0;
  std::shared_ptr<output_credit> credit;
  /// `opts.spec`'s task id and attempt, kept: the spec itself is moved into
  /// the runtime. The runtime's messages carry the attempt: a kept worker
  /// drops what an earlier attempt's runtime still sends.
  std::string task_id;
  int attempt = 0;
  std::string agent_id;
  /// The task's state directory, for `attempt_started`.
  std::string state_dir;
  /// The attempt's runtime id, as announced. The runtime may tell it after
  /// `start` returned (`attempt_handle::id_later`): `attempt_started`
  /// waits for it meanwhile.
  std::string runtime_id;
  bool id_pending = false;
  /// Between the attempts of a kept worker (`worker_options::keep`).
  bool idle = false;
  /// Its supervisor went down: end once the attempt has.
  bool orphaned = false;
  /// With `opts.adopt_grace` (a worker node's attempt), the worker outlives
  /// its supervisor's coordinator for one that takes over:
  /// - `reported`: the report went to the supervisor, and a copy stays in
  ///   `held_report` until the supervisor has recorded it (`release`);
  /// - `awaiting_owner`: the supervisor became unreachable; nothing is sent
  ///   meanwhile, and the report of an attempt that ends is held;
  /// - `claimed`: its agent handed it to a new owner, whose `(resume)` ends
  ///   the wait (and gets the held report).
  /// Each state lasts one grace at most; `owner_gen` tells the current
  /// grace check from an earlier one's.
  bool reported = false;
  bool awaiting_owner = false;
  bool claimed = false;
  std::uint64_t owner_gen = 0;
  std::optional<attempt_report> held_report;
  /// Reads the agent's structured output; absent for plain text.
  std::optional<output_parser> parser;
  /// Plain text: where its answer is (its last fenced JSON block).
  answer_scanner answers;
  /// Idle detection (opts.idle_timeout_s > 0): when the last line came, the
  /// generation of the check in flight, and whether it stopped the attempt.
  /// The checks (and the adoption grace's) go through a hidden timer actor
  /// holding only a weak handle, so a pending check neither keeps this
  /// worker nor the system alive.
  runtime::scripted_runtime::timer_fn timer;
  caf::actor_clock::time_point last_output;
  std::uint64_t idle_gen = 0;
  bool idle_stopped = false;
  /// The agent's `idle_noise`: lines matching it do not move `last_output`.
  /// `noise_only` says that every line since `last_output` was noise (the
  /// last one kept in `last_noise`), so an idle stop names it.
  idle_noise_filter noise;
  bool noise_only = false;
  std::string last_noise;
  static inline const char* name = "tasksup.container_worker";

  const std::shared_ptr<runtime::attempt_handle>& handle() const {
    return slot->handle;
  }

  /// The event head, stamped now.
  event_head head() const {
    event_head h;
    h.task_id = task_id;
    h.attempt = attempt;
    h.trace_id = opts.trace_id;
    h.span_id = opts.span_id;
    h.ts = wall_clock_s();
    return h;
  }
};

/// The worker's interface and its own messages: from its runtime's thread
/// (the attempt's runtime id, output lines and notices, its exit) and its
/// idle checks.
using worker_impl = container_worker_actor::extend<
  caf::reacts_to<start_atom, int, std::string>,
  caf::reacts_to<output_atom, int, bool, std::string>,
  caf::reacts_to<output_atom, int, std::string>,
  caf::reacts_to<exit_atom, int, attempt_outcome>,
  caf::reacts_to<idle_check_atom, std::uint64_t>,
  caf::reacts_to<adopt_end_atom, std::uint64_t>>;

using worker_actor = worker_impl::stateful_pointer<worker_state>;

/// The current message is the worker's supervisor's.
bool from_supervisor(worker_actor self) {
  return self->current_sender() ==
         caf::actor_cast<caf::strong_actor_ptr>(self->state.supervisor);
}

/// Whether the worker has nobody to tell: orphaned, or waiting for a new
/// owner.
bool unowned(const worker_state& st) {
  return st.orphaned || st.awaiting_owner;
}

/// Sends one of the attempt's events where `worker_options::events` says;
/// an unowned worker has nobody to tell.
void emit(worker_actor self, event ev) {
  auto& st = self->state;
  if (unowned(st))
    return;
  if (st.opts.events)
    self->send(st.opts.events, event_atom::value, std::move(ev));
  else
    self->send(st.supervisor, event_atom::value, std::move(ev));
}

/// Sends the worker `(atom, gen)` after `delay`, through its timer.
template<class Atom>
void send_later(worker_actor self, caf::timespan delay, Atom atom,
                std::uint64_t gen) {
  auto& st = self->state;
  if (!st.timer)
    st.timer = make_actor_timer(self->system());
  auto weak = caf::actor_cast<caf::weak_actor_ptr>(self);
  st.timer(std::chrono::duration<double>(delay).count(), [weak, atom, gen] {
    if (auto strong = weak.lock())
      caf::anon_send(caf::actor_cast<worker_impl>(strong), atom, gen);
  });
}

/// Schedules the next idle check `delay` from now; older checks go stale.
void schedule_idle_check(worker_actor self, caf::timespan delay) {
  auto gen = ++self->state.idle_gen;
  send_later(self, delay, idle_check_atom::value, gen);
}

/// Starts a grace: when it runs out, the current state ends.
void start_grace(worker_actor self) {
  auto& st = self->state;
  send_later(self, st.opts.adopt_grace, adopt_end_atom::value, ++st.owner_gen);
}

/// Its supervisor became unreachable: the attempt runs on (or its report
/// waits), unowned, for `adopt_grace`.
void await_owner(worker_actor self) {
  auto& st = self->state;
  st.reported = false;
  st.awaiting_owner = true;
  st.claimed = false;
  start_grace(self);
}

/// Sends `report` to the supervisor; with an adoption grace, keeps a copy
/// until the supervisor recorded it (`release`), else the worker is done
/// with the attempt. Not when nobody can adopt it: orphaned, or its node
/// stops.
void send_report(worker_actor self, attempt_report report) {
  auto& st = self->state;
  if (st.opts.adopt_grace.count() > 0 && !st.orphaned &&
      st.lost_with_node.empty()) {
    st.held_report = report;
    st.reported = true;
    start_grace(self);
  }
  self->send(st.supervisor, attempt_exited_atom::value, std::move(report));
}

/// Nobody adopted the attempt (the grace ran out, or its node stops): it
/// is killed, and the worker ends with it.
void abandon(worker_actor self) {
  auto& st = self->state;
  st.awaiting_owner = false;
  st.orphaned = true;
  if (st.handle() && !st.held_report)
    st.handle()->kill();
  else
    self->quit();
}

caf::timespan idle_limit(const worker_state& st) {
  return std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(st.opts.idle_timeout_s));
}

/// Forgets the last attempt (a kept worker runs the next one).
void reset_attempt(worker_state& st) {
  st.lost_with_node.clear();
  st.runtime_id.clear();
  st.slot->handle = nullptr;
  st.log_events = 0;
  st.parser.reset();
  st.answers = answer_scanner{};
  ++st.idle_gen; // no check of the last attempt fires
  st.idle_stopped = false;
  st.noise_only = false;
  st.last_noise.clear();
}

/// The attempt runs as `runtime_id` (a pid, a container id; empty when it
/// never started): its `attempt_started` event, and the journal's record
/// of what a restarted node adopts.
void announce_start(worker_actor self, const std::string& runtime_id) {
  auto& st = self->state;
  st.id_pending = false;
  st.runtime_id = runtime_id;
  emit(self, attempt_started_event(st.head(), st.agent_id, st.opts.agent_cli,
                                   runtime_id, st.state_dir));
  if (st.opts.report_runtime_id && !runtime_id.empty() && !unowned(st))
    self->send(st.supervisor, start_atom::value, st.attempt, runtime_id);
}

void start_attempt(worker_actor self) {
  auto& st = self->state;
  st.idle = false;
  st.credit = std::make_shared<output_credit>();
  st.task_id = st.opts.spec.task_id;
  st.attempt = st.opts.spec.attempt;
  // The callbacks hold a strong handle: the runtime may call them after the
  // last message to this worker, from its own thread.
  auto me = caf::actor_cast<worker_impl>(self);
  runtime::attempt_callbacks cb;
  cb.on_line = [me, credit = st.credit, attempt = st.attempt](
                 runtime::output_stream stream, std::string_view line) {
    auto n = output_credit::cost(line.size());
    // Counted before it is sent, so the worker never counts below zero.
    auto go_on = credit->sent(n);
    caf::anon_send(me, output_atom::value, attempt,
                   stream == runtime::output_stream::err, std::string{line});
    return go_on;
  };
  cb.on_notice = [me, attempt = st.attempt](std::string_view text) {
    caf::anon_send(me, output_atom::value, attempt, std::string{text});
  };
  cb.on_exit = [me, attempt = st.attempt](attempt_outcome out) {
    caf::anon_send(me, exit_atom::value, attempt, std::move(out));
  };
  cb.on_started = [me, attempt = st.attempt](std::string_view runtime_id) {
    caf::anon_send(me, start_atom::value, attempt, std::string{runtime_id});
  };
  // May throw (a broken runtime driver): the worker then dies and its
  // supervisor classifies the missing report as infrastructure.
  // The spec is not needed after this: move it rather than copy its argv,
  // environment and labels on every attempt.
  // Only the names the agent lists; the task's own env wins.
  for (const auto& name : st.opts.env_passthrough)
    if (const char* value = std::getenv(name.c_str()))
      st.opts.spec.env.emplace(name, value);
  if (st.opts.output != output_format::text)
    st.parser.emplace(st.opts.output);
  st.agent_id = st.opts.spec.agent_id;
  st.state_dir = st.opts.spec.state_dir;
  if (st.opts.adopt_id) {
    // The attempt outlived a node that restarted: take it over.
    runtime::adopt_spec a;
    a.task_id = st.opts.spec.task_id;
    a.attempt = st.opts.spec.attempt;
    a.agent_id = st.agent_id;
    a.attempt_dir = st.opts.spec.attempt_dir;
    a.runtime_id = *st.opts.adopt_id;
    a.labels = std::move(st.opts.spec.labels);
    st.slot->handle = st.opts.runtime->adopt(std::move(a), std::move(cb));
    emit(self,
         warning_event(st.head(), "attempt " + std::to_string(st.attempt) +
                                    " adopted after the node restarted"));
    return;
  }
  st.slot->handle =
    st.opts.runtime->start(std::move(st.opts.spec), std::move(cb));
  // The process runtime does not wait for its shim to start the agent: the
  // pid comes through on_started, before any output or the exit.
  if (st.handle() && st.handle()->id_later())
    st.id_pending = true;
  else
    announce_start(self, st.handle() ? st.handle()->id() : std::string{});
  if (st.handle() && st.opts.idle_timeout_s > 0) {
    if (!st.opts.idle_noise.empty())
      st.noise = idle_noise_filter{st.opts.idle_noise};
    st.last_output = self->clock().now();
    schedule_idle_check(self, idle_limit(st));
  }
}

worker_impl::behavior_type container_worker(worker_actor self,
                                            attempt_owner_actor supervisor,
                                            worker_options opts) {
  self->state.opts = std::move(opts);
  self->state.timer = std::move(self->state.opts.timer);
  self->state.supervisor = supervisor;
  self->monitor(supervisor);
  // However the worker ends (an exit message from an embedding application,
  // a crash), its attempt must not outlive it: kill() after the attempt has
  // ended does nothing, so a normal end is unaffected.
  self->attach_functor([slot = self->state.slot](const caf::error&) {
    if (slot->handle)
      slot->handle->kill();
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.supervisor.address())
      return;
    if (st.opts.adopt_grace.count() > 0 && !st.idle &&
        (st.handle() || st.reported) &&
        dm.reason == caf::exit_reason::remote_link_unreachable) {
      // Its coordinator is gone: one that takes over may adopt it.
      await_owner(self);
      return;
    }
    // Nobody is left to report to: end the attempt, then quit.
    st.orphaned = true;
    if (st.handle() && !st.idle && !st.reported && !st.held_report)
      st.handle()->kill();
    else
      self->quit();
  });
  // Started here, on the worker's first run, rather than through a message
  // to itself: one mailbox round trip less per attempt. A runtime that
  // throws still ends the worker without a report.
  start_attempt(self);
  return {
    [=](start_atom, int attempt, const std::string& runtime_id) {
      auto& st = self->state;
      if (attempt != st.attempt || st.idle || !st.id_pending)
        return;
      announce_start(self, runtime_id);
    },
    [=](output_atom, int attempt, bool is_stderr, std::string& line) {
      auto& st = self->state;
      if (attempt != st.attempt || st.idle)
        return;
      if (st.credit->received(output_credit::cost(line.size())) && st.handle())
        st.handle()->resume_output();
      if (st.opts.idle_timeout_s > 0) {
        if (st.noise.is_noise(line)) {
          st.noise_only = true;
          st.last_noise.assign(line, 0,
                               std::min(line.size(), noise_line_bytes));
        } else {
          st.last_output = self->clock().now();
          st.noise_only = false;
        }
      }
      // A person sees the parser's rendering (nothing for machinery events);
      // the runtime's tail keeps the raw line for the text rules.
      auto shown = st.parser ? st.parser->feed(line) : std::string{};
      if (!st.parser)
        st.answers.feed(line);
      if ((!st.parser || !shown.empty()) &&
          st.log_events < static_cast<std::size_t>(st.opts.max_log_events)) {
        ++st.log_events;
        emit(self, log_event(st.head(), st.parser ? shown : line,
                             is_stderr ? "stderr" : "stdout"));
      }
    },
    // The runtime's word on what its output limits held back: always
    // forwarded, past `max_log_events` too, so the count is never lost.
    [=](output_atom, int attempt, std::string& text) {
      auto& st = self->state;
      if (attempt != st.attempt || st.idle)
        return;
      emit(self, log_event(st.head(), "tasksup: " + text, "tasksup"));
    },
    [=](exit_atom, int attempt, attempt_outcome& out) {
      auto& st = self->state;
      if (attempt != st.attempt || st.idle)
        return;
      // A runtime that never said the id still started the attempt first.
      if (st.id_pending)
        announce_start(self, {});
      ++st.idle_gen; // no check after the exit
      if (st.parser)
        out.structured = st.parser->result();
      if (st.idle_stopped) {
        auto result = out.structured.value_or(structured_result{});
        structured_error e;
        if (st.noise_only) {
          // The line a person recognises ("Reconnecting..."), as the CLI
          // printed it.
          e.type = std::string{idle_noise_type};
          e.message = st.last_noise;
        } else {
          e.type = std::string{idle_timeout_type};
          e.message = "no output for " +
                      std::to_string(st.opts.idle_timeout_s) +
                      " s: stopped (idle_timeout_s)";
        }
        result.error = std::move(e);
        out.structured = std::move(result);
      }
      if (!st.lost_with_node.empty()) {
        out.lost_node = st.lost_with_node;
        out.infrastructure_error =
          "worker node " + st.lost_with_node + " stopped during the attempt";
      } else if (st.opts.adopt_id && !out.infrastructure_error.empty()) {
        // Taken over after a restart but not watched to its end (its start
        // was cut, its records unusable): lost with this node's earlier
        // run, not failed by its agent. Like an attempt lost with a worker
        // node it runs again at once and does not count against the
        // agent's circuit breaker.
        out.lost_node = std::string{restarted_node_name};
      }
      attempt_report report;
      report.attempt = st.attempt;
      // The answer, unchecked: the supervisor knows the schema.
      report.answer = st.parser ? answer_in_message(st.parser->final_text())
                                : st.answers.last();
      report.outcome = std::move(out);
      // The handle's id now (Docker's becomes the container's once the
      // engine created it), else the one announced.
      report.container_id = st.handle() ? st.handle()->id() : std::string{};
      if (report.container_id.empty())
        report.container_id = st.runtime_id;
      if (st.awaiting_owner) {
        // For the new owner, if one comes in time.
        st.held_report = std::move(report);
        return;
      }
      send_report(self, std::move(report));
      if (st.reported)
        return;
      if (st.opts.keep && !st.orphaned) {
        // Kept for the task's next attempt (one actor per task, not one
        // per attempt).
        reset_attempt(st);
        st.idle = true;
        return;
      }
      // The monitor leaves a weak reference in the supervisor, which would
      // keep this worker's memory until the task ends: one block per attempt.
      self->demonitor(st.supervisor.address());
      self->quit();
    },
    // Between attempts (a kept worker), or once its report is recorded.
    [=](release_atom) {
      auto& st = self->state;
      if (!(st.idle || st.reported) || !from_supervisor(self))
        return;
      self->demonitor(st.supervisor.address());
      self->quit();
    },
    [=](next_attempt_atom, attempt_options& next) {
      auto& st = self->state;
      if (!st.idle || !from_supervisor(self))
        return;
      static_cast<attempt_options&>(st.opts) = std::move(next);
      start_attempt(self);
    },
    [=](idle_check_atom, std::uint64_t gen) {
      auto& st = self->state;
      if (gen != st.idle_gen || st.idle_stopped || !st.handle() || st.idle)
        return;
      auto limit = idle_limit(st);
      auto idle = self->clock().now() - st.last_output;
      if (idle < limit) {
        schedule_idle_check(self, limit - idle);
        return;
      }
      st.idle_stopped = true;
      auto what = st.noise_only ? "tasksup: only idle noise (the profile's "
                                  "idle_noise lines) for "
                                : "tasksup: no output for ";
      emit(self,
           log_event(st.head(), what + std::to_string(st.opts.idle_timeout_s) +
                                  " s: stopping the attempt"));
      st.handle()->stop(std::chrono::milliseconds{st.opts.idle_stop_grace_ms});
    },
    // Its node is stopping (a worker node's agent): the attempt is killed
    // and reported as lost with the node, so its coordinator retries it
    // elsewhere at once.
    [=](node_lost_atom, std::string& node) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != self->node())
        return;
      if (st.idle)
        return;
      if (st.awaiting_owner && !st.claimed) {
        abandon(self);
        return;
      }
      if (st.reported) {
        self->quit(); // reported already: nothing left to end
        return;
      }
      st.lost_with_node = std::move(node);
      if (st.handle())
        st.handle()->kill();
    },
    // Its agent hands the attempt to the coordinator that took over.
    [=](adopt_atom, attempt_owner_actor& owner) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != self->node() || !owner ||
          !st.awaiting_owner || st.claimed)
        return;
      st.supervisor = std::move(owner);
      self->monitor(st.supervisor);
      st.claimed = true;
      start_grace(self);
    },
    // Its new owner has it: what it held back goes there now.
    [=](resume_atom) {
      auto& st = self->state;
      if (!st.claimed || !from_supervisor(self))
        return;
      st.awaiting_owner = false;
      st.claimed = false;
      ++st.owner_gen; // owned again: no grace runs
      if (auto report = std::exchange(st.held_report, std::nullopt))
        send_report(self, std::move(*report));
    },
    [=](adopt_end_atom, std::uint64_t gen) {
      auto& st = self->state;
      if (gen != st.owner_gen)
        return;
      if (st.awaiting_owner)
        abandon(self);
      else if (st.reported)
        self->quit(); // never released: its supervisor moved on
    },
    [=](stop_atom, stop_mode mode, std::int64_t grace_ms) {
      auto& st = self->state;
      if (!st.handle() || st.idle)
        return;
      if (mode == stop_mode::kill)
        st.handle()->kill();
      else
        st.handle()->stop(std::chrono::milliseconds{grace_ms});
    },
  };
}

} // namespace

void apply_agent_options(attempt_options& opts, const agent_spec& agent) {
  opts.output = agent.output;
  opts.idle_timeout_s = agent.idle_timeout_s;
  opts.idle_noise = agent.idle_noise;
  opts.env_passthrough = agent.env_passthrough;
}

container_worker_actor spawn_container_worker(caf::actor_system& sys,
                                              attempt_owner_actor supervisor,
                                              worker_options opts) {
  return sys.spawn(container_worker, std::move(supervisor), std::move(opts));
}

container_worker_actor spawn_container_worker(caf::local_actor* spawner,
                                              attempt_owner_actor supervisor,
                                              worker_options opts) {
  return spawner->spawn(container_worker, std::move(supervisor),
                        std::move(opts));
}

} // namespace tasksup

// The task supervisor carries the task machine (libsupervisor's
// task_machine): it turns messages into the machine's inputs and the
// machine's effects into sends, requests, timers and spawns. Every decision
// and every delay is made by the machine.

#include "tasksup/actors/task_supervisor_actor.hpp"

#include "actor_now.hpp"

#include "task_settings.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/container_worker_actor.hpp"
#include "tasksup/actors/events.hpp"

#include "tasksup/runtime/workspace.hpp"
#include "tasksup/supervisor/agent_chain.hpp"

#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

/// A job on a task's workspace thread (false: the last one, the thread
/// ends), or a reply run back on the supervisor.
using workspace_fn = std::function<bool()>;

} // namespace tasksup::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tasksup::detail::workspace_fn)

namespace tasksup {

namespace {

using detail::now_s;
using detail::workspace_fn;

using ws_job_atom = caf::atom_constant<caf::atom("wsjob")>;
using ws_done_atom = caf::atom_constant<caf::atom("wsdone")>;

/// The task's workspace thread: git, gates, preflight and delivery block,
/// so they run here, one job after the other, never on the scheduler.
caf::behavior workspace_actor(caf::event_based_actor* self) {
  return {[=](ws_job_atom, workspace_fn& job) {
    if (!job())
      self->quit();
  }};
}

/// What a task with a repository, gates, a preflight or feedback keeps
/// while it runs.
struct hook_run {
  /// The workspace thread, spawned on first use.
  caf::actor ws;
  /// Null without a repository.
  std::shared_ptr<const runtime::repo_workspace> repo;
  /// The base's commit, resolved before the first attempt.
  std::string base_commit;
  /// The current attempt's directory and worktree (empty: none).
  std::string attempt_dir;
  std::string worktree;
  /// The current attempt failed (its worktree is kept with keep_failed).
  bool failed = false;
  /// The attempt whose change was captured as a patch.
  int captured = 0;
  bool change_empty = true;
  /// Set when the task ends: a running gate or preflight is killed.
  std::shared_ptr<std::atomic<bool>> cancel =
    std::make_shared<std::atomic<bool>>(false);
  /// Feedback for the next attempt: the failed attempt, why, what it said.
  int failed_attempt = 0;
  std::string reason;
  std::vector<std::string> lines;
  /// The last failed attempt's and gate's (or preflight's) output lines.
  std::vector<std::string> attempt_tail;
  std::vector<std::string> step_tail;
};

using detail::shared_settings;
using detail::task_settings;

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
  /// For a task rebuilt after a node restart: its journaled inputs.
  bool resume = false;
  std::vector<journaled_input> replay;
  journal_actor journal;
  std::int64_t journal_seq = 0;
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
  /// The task, as the machine keeps it.
  task_machine_state m;
  std::optional<trace_id_generator> ids;
  /// The span of events outside attempts (submission, end of the task).
  span_text task_span;
  /// The span of the current attempt.
  span_text span;
  /// The attempt `span` belongs to (its preflight and its run share it).
  int span_attempt = 0;
  /// The task brought its own classifier rules (dropped when it ends).
  bool has_own_rules = false;
  caf::actor worker;
  /// Where the next attempt runs, as the registry placed it: a worker
  /// node's name and agent (empty and null: on this node).
  std::string placed_node;
  caf::actor placed_agent;
  std::string placed_runtime;
  /// The worker node of `worker` (empty: this node).
  std::string worker_node;
  /// This node's worker of the last attempt, kept (and monitored) for the
  /// next one: one actor per task instead of one per attempt.
  caf::actor kept_worker;
  /// The attempt a worker node is starting (its worker not known yet), and
  /// the stop asked for meanwhile.
  int remote_starting = 0;
  std::optional<std::pair<stop_mode, std::int64_t>> pending_stop;
  /// The node's journal (null: none), the task's number in it and the
  /// number of the last input recorded.
  journal_actor journal;
  std::int64_t journal_seq = 0;
  std::int64_t journal_n = 0;
  /// After a restart: the runtime id of the attempt to adopt (from the
  /// journal), and the directory of the attempt being adopted.
  std::string adopt_id;
  std::string adopted_dir;
  int adopted_attempt = 0;
  /// The failed attempt's outcome with its output tail, for the classifier.
  std::optional<attempt_outcome> to_classify;
  /// Null for tasks without repository, gates, preflight or feedback.
  std::unique_ptr<hook_run> run;
  static inline const char* name = "tasksup.task_supervisor";

  const task_machine& machine() const { return node->machine; }

  const agent_spec& agent(std::size_t i) const { return (*node->agents)[i]; }

  const agent_spec& agent() const { return agent(m.counters.agent_index); }

  const std::string& task_id() const { return opts->task.id; }

  event_head head(bool in_attempt = true) const {
    event_head h;
    h.task_id = opts->task.id;
    h.attempt = m.attempt;
    h.trace_id = opts->trace_id;
    h.span_id = in_attempt && m.attempt > 0 ? span : task_span;
    h.ts = wall_clock_s();
    return h;
  }
};

using supervisor_actor = caf::stateful_actor<supervisor_state>;

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
    std::chrono::duration<double>(seconds));
}

stop_mode to_stop_mode(stop_request x) {
  return x == stop_request::kill ? stop_mode::kill : stop_mode::cancel;
}

void emit(supervisor_actor* self, event ev) {
  self->send(self->state.parent, event_atom::value, std::move(ev));
}

/// Called once an input's effects were carried out, with whether it took
/// effect.
using after_input = std::function<void(bool)>;

bool drive(supervisor_actor* self, machine_input in, after_input then = {});

void attempt_ended(supervisor_actor* self, int attempt, attempt_outcome out);

/// The machine's input for the end of `attempt` (the carrier keeps the
/// output tail for the classifier).
input::attempt_ended ended_input(supervisor_actor* self, int attempt,
                                 attempt_outcome out);

/// A remote attempt's runtime id, as the journal keeps it:
/// `node:<node>/<id on that node>`.
std::string remote_runtime_id(const std::string& node, const std::string& id) {
  return "node:" + node + "/" + id;
}

/// The node of a runtime id made by `remote_runtime_id`, else empty.
std::string remote_node_of(const std::string& runtime_id) {
  if (runtime_id.rfind("node:", 0) != 0)
    return {};
  auto slash = runtime_id.find('/', 5);
  return runtime_id.substr(5, slash == std::string::npos ? std::string::npos
                                                         : slash - 5);
}

using attempt_timer_atom = caf::atom_constant<caf::atom("attempttmr")>;

/// Supervisor -> itself: `(worker_gone, attempt)`: a remote worker went
/// down while its node stayed connected and its report has had time to
/// arrive.
using worker_gone_atom = caf::atom_constant<caf::atom("workergone")>;

/// How long a supervisor waits for the report of a remote worker that went
/// down: CAF may deliver the worker's down message before the messages it
/// sent just before it ended (they are deserialized apart, and arrive
/// through a new proxy of the worker).
constexpr std::chrono::seconds remote_report_grace{2};

/// `<attempt_root>/<task id>/attempt-<n>`, as make_attempt_spec names it.
std::string attempt_dir_of(const supervisor_state& s, int attempt) {
  std::string dir = s.node->attempt_root;
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  return dir + s.task_id() + "/attempt-" + std::to_string(attempt);
}

bool in_container(const supervisor_state& s) {
  return s.node->runtime && s.node->runtime->name() == "docker";
}

/// Runs `job` on the task's workspace thread (spawned on first use).
void ws_submit(supervisor_actor* self, workspace_fn job) {
  auto& run = *self->state.run;
  if (!run.ws)
    run.ws = self->system().spawn<caf::detached>(workspace_actor);
  self->send(run.ws, ws_job_atom::value, std::move(job));
}

/// From a job: runs `reply` on the supervisor (dropped if it is gone).
void ws_reply(const caf::actor& sup, workspace_fn reply) {
  caf::anon_send(sup, ws_done_atom::value, std::move(reply));
}

/// What a gate or the preflight learns about its attempt.
std::map<std::string, std::string> hook_env(const supervisor_state& s,
                                            int attempt) {
  std::map<std::string, std::string> env;
  env["TASKSUP_TASK_ID"] = s.task_id();
  env["TASKSUP_ATTEMPT"] = std::to_string(attempt);
  std::string span{std::string_view{s.span}};
  env["TASKSUP_TRACE_ID"] = s.opts->trace_id;
  env["TASKSUP_SPAN_ID"] = span;
  env["TRACEPARENT"] = "00-" + s.opts->trace_id + "-" + span + "-01";
  if (s.run && !s.run->worktree.empty())
    env["TASKSUP_WORKTREE"] = s.run->worktree;
  return env;
}

std::string joined(const std::vector<std::string>& lines, std::size_t max) {
  std::string out;
  auto from = lines.size() > max ? lines.size() - max : 0;
  for (auto i = from; i < lines.size(); ++i) {
    out += lines[i];
    out += '\n';
  }
  return out;
}

void attempt_ended(supervisor_actor* self, int attempt, attempt_outcome out);

/// An attempt lost with worker node `node`: why, for the classifier.
attempt_outcome lost_outcome(const std::string& node, std::string why) {
  attempt_outcome out;
  out.exit_code = -1;
  out.lost_node = node;
  out.infrastructure_error = "worker node " + node + " lost: " + why;
  return out;
}

/// Takes `w` as the worker of the current attempt (it runs on `node`).
void take_worker(supervisor_actor* self, caf::actor w,
                 const std::string& node) {
  auto& s = self->state;
  s.worker = std::move(w);
  s.worker_node = node;
  s.remote_starting = 0;
  self->monitor(s.worker);
  if (auto stop = std::exchange(s.pending_stop, std::nullopt))
    self->send(s.worker, stop_atom::value, stop->first, stop->second);
}

/// Whether the current message comes from the current attempt's worker, or
/// from the worker node starting it (its first words may come before the
/// node's answer; the worker is then taken from them).
bool from_worker(supervisor_actor* self) {
  auto& s = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return false;
  // By identity, not by handle: a remote worker's proxy is replaced when
  // its down message overtakes its last messages, which then come from a
  // new proxy of the same actor.
  if (s.worker)
    return sender->node() == s.worker.node() && sender->id() == s.worker.id();
  if (s.remote_starting == 0 || !s.placed_agent ||
      sender->node() != s.placed_agent.node())
    return false;
  take_worker(self, caf::actor_cast<caf::actor>(sender), s.placed_node);
  return true;
}

/// Asks the worker node the registry placed the attempt on to start it.
void start_remote(supervisor_actor* self, worker_options w) {
  auto& s = self->state;
  auto ra = to_remote(std::move(w), s.placed_runtime);
  auto attempt = ra.spec.attempt;
  auto node = s.placed_node;
  s.remote_starting = attempt;
  self
    ->request(s.placed_agent, remote_start_timeout, run_attempt_atom::value,
              std::move(ra), caf::actor_cast<caf::actor>(self))
    .then(
      [self, attempt, node](caf::actor& worker) {
        auto& st = self->state;
        if (st.remote_starting == attempt)
          take_worker(self, std::move(worker), node);
      },
      [self, attempt, node](caf::error& err) {
        auto& st = self->state;
        if (st.remote_starting != attempt)
          return;
        st.remote_starting = 0;
        st.pending_stop.reset();
        if (err == caf::sec::request_timeout) {
          // The node never answered: as good as lost.
          if (st.node->services)
            self->send(st.node->services, node_lost_atom::value, node,
                       st.placed_agent.node());
          attempt_ended(
            self, attempt,
            lost_outcome(node, "it did not start the attempt "
                               "within " +
                                 std::to_string(remote_start_timeout.count()) +
                                 " s"));
          return;
        }
        attempt_outcome out;
        out.exit_code = -1;
        out.infrastructure_error =
          "worker node " + node +
          " could not start the attempt: " + error_text(err);
        attempt_ended(self, attempt, std::move(out));
      });
}

/// Starts the worker of the attempt whose spec is ready.
void spawn_worker(supervisor_actor* self, runtime::attempt_spec spec,
                  std::size_t agent_index) {
  auto& s = self->state;
  const auto& agent = s.agent(agent_index);
  worker_options w;
  apply_agent_options(w, agent);
  w.spec = std::move(spec);
  w.runtime = s.node->runtime;
  w.trace_id = s.opts->trace_id;
  w.span_id = std::string_view{s.span};
  w.agent_cli = agent.agent_cli;
  w.report_runtime_id = static_cast<bool>(s.journal);
  if (s.placed_agent) {
    start_remote(self, std::move(w));
    return;
  }
  s.worker_node.clear();
  w.events = s.parent;
  w.keep = true;
  if (s.kept_worker) {
    s.worker = std::exchange(s.kept_worker, nullptr);
    self->send(s.worker, next_attempt_atom::value, std::move(w));
    return;
  }
  s.worker = spawn_container_worker(self, caf::actor_cast<caf::actor>(self),
                                    std::move(w));
  self->monitor(s.worker);
}

/// Lets the current attempt's worktree go: removed, or kept for inspection
/// when it failed and the task says `keep_failed`. `last`: the task ends
/// (its workspace thread ends after this job).
void drop_worktree(supervisor_actor* self, bool last, bool failed) {
  auto& s = self->state;
  auto& run = *s.run;
  auto dir = std::exchange(run.worktree, {});
  auto keep = !dir.empty() && s.opts->hooks->keep_failed && failed;
  if (keep)
    emit(self, step_event(s.head(), "worktree", "", true, std::nullopt,
                          "failed attempt's worktree kept at " + dir));
  if (dir.empty() || keep) {
    if (last && run.ws)
      ws_submit(self, [ws = run.ws]() mutable {
        ws = nullptr;
        return false;
      });
    return;
  }
  auto repo = run.repo;
  // The last job holds the thread's handle until it ran.
  caf::actor ws_hold = last ? run.ws : caf::actor{};
  ws_submit(self, [repo, dir, last, ws_hold]() mutable {
    repo->remove(dir);
    ws_hold = nullptr;
    return !last;
  });
}

/// The worktree of attempt `attempt` is ready (or could not be made).
void worktree_ready(supervisor_actor* self, runtime::attempt_spec spec,
                    std::size_t agent_index, int attempt,
                    const std::string& commit, const std::string& err) {
  auto& s = self->state;
  if (!commit.empty())
    s.run->base_commit = commit;
  if (s.m.phase != task_phase::running || s.m.attempt != attempt || s.worker)
    return;
  attempt_outcome out;
  out.exit_code = -1;
  out.started = false;
  if (!err.empty()) {
    emit(self, step_event(s.head(), "worktree", "", false, std::nullopt, err));
    out.infrastructure_error = "cannot prepare the worktree: " + err;
    attempt_ended(self, attempt, std::move(out));
    return;
  }
  // Stopped (user, deadline, timeout, fallback) while it was made.
  if (s.m.stop != stop_request::none || s.m.timed_out || s.m.deadline_passed ||
      s.m.fallback_requested) {
    out.infrastructure_error = "stopped before the agent started";
    attempt_ended(self, attempt, std::move(out));
    return;
  }
  spawn_worker(self, std::move(spec), agent_index);
}

/// A task with hooks: feedback into the spec, then (repository tasks) a
/// fresh worktree at the base, then the worker.
void prepare_attempt(supervisor_actor* self, runtime::attempt_spec spec,
                     std::size_t agent_index, int attempt) {
  auto& s = self->state;
  auto& run = *s.run;
  const auto& h = *s.opts->hooks;
  if (!run.worktree.empty())
    drop_worktree(self, false, run.failed);
  run.attempt_dir = spec.attempt_dir;
  run.failed = false;
  auto docker = in_container(s);
  if (h.feedback.enabled && run.failed_attempt > 0) {
    auto output = joined(run.lines, static_cast<std::size_t>(h.feedback.lines));
    // The runtime that runs the attempt writes it where the agent finds it
    // (TASKSUP_FEEDBACK), on whichever node that is.
    spec.feedback = "attempt: " + std::to_string(run.failed_attempt) +
                    "\nreason: " + run.reason + "\n\n" + output;
    auto prompt =
      runtime::feedback_prompt(s.opts->task.prompt, h.feedback.template_text,
                               run.failed_attempt, run.reason, output);
    if (s.agent(agent_index).prompt_as_argument && !spec.argv.empty())
      spec.argv.back() = std::move(prompt);
    else
      spec.env["TASKSUP_PROMPT"] = std::move(prompt);
  }
  if (!run.repo) {
    spawn_worker(self, std::move(spec), agent_index);
    return;
  }
  run.worktree = spec.attempt_dir + "/workspace";
  // A container sees the worktree at its workspace mount.
  if (!docker)
    spec.workdir = run.worktree;
  spec.env["TASKSUP_WORKTREE"] = docker ? "/workspace" : run.worktree;
  auto sup = caf::actor_cast<caf::actor>(self);
  auto* me = self;
  ws_submit(self, [sup, me, repo = run.repo, base = run.base_commit,
                   dir = run.worktree, spec = std::move(spec), agent_index,
                   attempt]() mutable {
    auto commit = base;
    std::string err;
    if (commit.empty()) {
      if (auto r = repo->resolve_base())
        commit = *r;
      else
        err = r.error().to_string();
    }
    if (err.empty())
      if (auto added = repo->add(dir, commit); !added)
        err = added.error().to_string();
    ws_reply(sup, [me, spec = std::move(spec), agent_index, attempt, commit,
                   err]() mutable {
      worktree_ready(me, std::move(spec), agent_index, attempt, commit, err);
      return true;
    });
    return true;
  });
}

/// One command's result as a `step` event.
void emit_step(supervisor_actor* self, std::string_view step,
               const std::string& name, const runtime::command_result& r) {
  std::string msg;
  if (!r.error.empty())
    msg = r.error;
  else if (r.timed_out)
    msg = "timed out";
  else if (r.cancelled)
    msg = "cancelled";
  else
    msg = (r.passed() ? "passed" : "failed") +
          (r.last_line().empty() ? std::string{} : ": " + r.last_line());
  emit(self, step_event(self->state.head(), step, name, r.passed(),
                        r.error.empty() ? std::optional<int>{r.exit_code}
                                        : std::nullopt,
                        msg));
}

/// A backoff this long lets the kept worker go (the next attempt spawns one).
constexpr double release_worker_after_s = 1.0;

/// Carries out one effect; an input it produces at once (a permission when
/// there are no node services) goes to `next`.
struct carrier {
  supervisor_actor* self;
  std::vector<machine_input>& next;

  supervisor_state& st() const { return self->state; }

  void operator()(const effect::ask_permission& e) const {
    auto& agent_id = st().agent(e.agent_index).agent_id;
    if (!st().node->services) {
      next.emplace_back(input::permission{e.generation, true, true, agent_id});
      return;
    }
    auto gen = e.generation;
    auto* s = self;
    permit_request req;
    req.task_id = st().task_id();
    req.agent_id = agent_id;
    req.need_slot = e.need_slot;
    req.need_token = e.need_token;
    // No timeout: waiting in the queue for a slot may take as long as the
    // tasks before this one run. The registry is on this node.
    self
      ->request(st().node->services, caf::infinite, permit_atom::value,
                std::move(req))
      .then(
        [s, gen, agent_id](permit_reply r) {
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
    auto& s = st();
    if (auto node = remote_node_of(s.adopt_id); !node.empty()) {
      // It ran on a worker node, which stopped it when it lost this node.
      auto out = lost_outcome(node, "the coordinator restarted while the "
                                    "attempt ran there");
      next.emplace_back(ended_input(self, e.attempt, std::move(out)));
      return;
    }
    const auto& agent = s.agent(e.agent_index);
    worker_options w;
    apply_agent_options(w, agent);
    w.spec = detail::make_attempt_spec(*s.opts, *s.node, agent, e.attempt);
    w.runtime = s.node->runtime;
    w.trace_id = s.opts->trace_id;
    w.span_id = std::string_view{s.span};
    w.agent_cli = agent.agent_cli;
    w.adopt_id = s.adopt_id;
    w.events = s.parent;
    w.keep = true;
    s.adopted_dir = w.spec.attempt_dir;
    s.adopted_attempt = e.attempt;
    s.worker = spawn_container_worker(self, caf::actor_cast<caf::actor>(self),
                                      std::move(w));
    self->monitor(s.worker);
  }

  void operator()(const effect::start_attempt& e) const {
    auto& s = st();
    if (s.span_attempt != e.attempt) {
      s.span = s.ids->span_id();
      s.span_attempt = e.attempt;
    }
    auto spec =
      detail::make_attempt_spec(*s.opts, *s.node, s.agent(e.agent_index),
                                e.attempt, std::string_view{s.span});
    if (s.run)
      prepare_attempt(self, std::move(spec), e.agent_index, e.attempt);
    else
      spawn_worker(self, std::move(spec), e.agent_index);
  }

  void operator()(const effect::run_preflight& e) const {
    auto& s = st();
    s.span = s.ids->span_id();
    s.span_attempt = e.attempt;
    const auto& cmd = *s.opts->hooks->preflight;
    runtime::command_options o;
    o.argv = cmd.argv;
    o.timeout_s = cmd.timeout_s;
    if (s.opts->hooks->repo)
      o.cwd = s.opts->hooks->repo->path;
    o.env = hook_env(s, e.attempt);
    // The attempt has no worktree yet.
    o.env.erase("TASKSUP_WORKTREE");
    o.tail_lines =
      static_cast<std::size_t>(std::max(s.opts->hooks->feedback.lines, 1));
    auto cancel = s.run->cancel;
    auto sup = caf::actor_cast<caf::actor>(self);
    auto* me = self;
    auto attempt = e.attempt;
    ws_submit(self, [sup, me, o, cancel, attempt, name = cmd.name]() mutable {
      o.cancel = cancel.get();
      auto r = runtime::run_command(o);
      ws_reply(sup, [me, r, attempt, name] {
        emit_step(me, "preflight", name, r);
        me->state.run->step_tail = r.tail;
        drive(me, input::preflight_done{attempt, r.passed(), r.exit_code,
                                        r.timed_out, r.last_line()});
        return true;
      });
      return true;
    });
  }

  void operator()(const effect::run_gates& e) const {
    auto& s = st();
    auto& run = *s.run;
    const auto& h = *s.opts->hooks;
    auto env = hook_env(s, e.attempt);
    auto sup = caf::actor_cast<caf::actor>(self);
    auto* me = self;
    auto attempt = e.attempt;
    auto lines = static_cast<std::size_t>(std::max(h.feedback.lines, 1));
    ws_submit(self, [sup, me, attempt, env, lines, gates = h.gates,
                     repo = run.repo, dir = run.worktree,
                     commit = run.base_commit, adir = run.attempt_dir,
                     cancel = run.cancel]() mutable {
      // The change is taken before the gates run, so whatever they build
      // (caches, outputs) is not part of it.
      std::string capture_err;
      bool empty = true;
      if (repo) {
        auto c = repo->capture_change(dir, commit, adir + "/change.patch");
        if (c)
          empty = c->empty;
        else
          capture_err = c.error().to_string();
      }
      std::vector<std::pair<std::string, runtime::command_result>> results;
      for (auto& g : gates) {
        if (!capture_err.empty())
          break;
        runtime::command_options o;
        o.argv = g.argv;
        o.cwd = dir;
        o.env = env;
        o.timeout_s = g.timeout_s;
        o.tail_lines = lines;
        o.log_path = adir + "/gates.log";
        o.cancel = cancel.get();
        results.emplace_back(g.name, runtime::run_command(o));
        if (!results.back().second.passed())
          break;
      }
      ws_reply(sup, [me, attempt, results, capture_err, empty] {
        auto& st = me->state;
        if (!capture_err.empty()) {
          emit(me, step_event(st.head(), "gate", "git", false, std::nullopt,
                              capture_err));
          st.run->step_tail = {capture_err};
          drive(me, input::gates_done{attempt, false, "git", -1, false,
                                      capture_err});
          return true;
        }
        st.run->captured = attempt;
        st.run->change_empty = empty;
        for (auto& [name, r] : results)
          emit_step(me, "gate", name, r);
        input::gates_done in;
        in.attempt = attempt;
        in.passed = true;
        if (!results.empty() && !results.back().second.passed()) {
          const auto& [name, r] = results.back();
          in.passed = false;
          in.gate = name;
          in.exit_code = r.exit_code;
          in.timed_out = r.timed_out;
          in.detail = r.last_line();
          st.run->step_tail = r.tail;
        }
        drive(me, std::move(in));
        return true;
      });
      return true;
    });
  }

  void operator()(const effect::deliver& e) const {
    auto& s = st();
    auto& run = *s.run;
    const auto& h = *s.opts->hooks;
    auto sup = caf::actor_cast<caf::actor>(self);
    auto* me = self;
    auto attempt = e.attempt;
    std::string message = "tasksup: task " + s.task_id() + ", agent " +
                          s.agent().agent_id + ", attempt " +
                          std::to_string(attempt);
    auto first = s.opts->task.prompt.substr(
      0, std::min(s.opts->task.prompt.find('\n'), std::size_t{200}));
    message += "\n\n" + first + "\n";
    ws_submit(self, [sup, me, attempt, message, mode = h.deliver,
                     repo = run.repo, dir = run.worktree,
                     commit = run.base_commit, adir = run.attempt_dir,
                     captured = run.captured == attempt,
                     empty = run.change_empty]() mutable {
      auto patch = adir + "/change.patch";
      std::string err;
      std::string detail;
      if (!captured) {
        if (auto c = repo->capture_change(dir, commit, patch))
          empty = c->empty;
        else
          err = c.error().to_string();
      }
      if (err.empty() && empty) {
        detail = "the attempt changed nothing; nothing to deliver";
      } else if (err.empty()) {
        switch (mode) {
          case delivery_mode::patch:
            detail = "patch at " + patch;
            break;
          case delivery_mode::apply:
            if (auto a = repo->apply(patch); !a)
              err = a.error().what;
            else
              detail = "applied to " + repo->repo().path;
            break;
          case delivery_mode::branch:
            if (auto c = repo->commit_to_branch(dir, repo->branch(), message);
                !c)
              err = c.error().what;
            else
              detail = "committed " + *c + " on " + repo->branch();
            break;
        }
      }
      ws_reply(sup, [me, attempt, mode, err, detail] {
        auto ok = err.empty();
        emit(me, step_event(me->state.head(), "deliver", to_string(mode), ok,
                            std::nullopt, ok ? detail : err));
        drive(me, input::delivered{attempt, ok, err});
        return true;
      });
      return true;
    });
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
    auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(e.grace_s));
    if (st().worker)
      self->send(st().worker, stop_atom::value, to_stop_mode(e.mode),
                 std::int64_t{grace.count()});
    else if (st().remote_starting != 0)
      st().pending_stop.emplace(to_stop_mode(e.mode),
                                std::int64_t{grace.count()});
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
    self
      ->request(s.node->classifier, caf::infinite, classify_atom::value,
                std::move(req))
      .then(
        [me, gen](classification& c) {
          drive(me, input::classified{gen, std::move(c)});
        },
        [me, gen](caf::error& err) {
          drive(me, input::reply_failed{gen, request_kind::classify,
                                        error_text(err)});
        });
  }

  void operator()(const effect::ask_delay& e) const {
    delay_request req{e.spec, e.retry_index, e.previous_s, e.hint_s};
    auto gen = e.generation;
    auto* me = self;
    self
      ->request(st().node->backoff, caf::infinite, delay_atom::value,
                std::move(req))
      .then(
        [me, gen](delay_decision d) {
          drive(me, input::delay_decided{gen, d});
        },
        [me, gen](caf::error& err) {
          drive(me,
                input::reply_failed{gen, request_kind::delay, error_text(err)});
        });
  }

  void operator()(const effect::set_timer& e) const {
    // A worker kept for the next attempt costs ~3 KB while the task waits:
    // worth it between quick retries, not over a long backoff.
    auto& s = st();
    if (e.kind == timer_kind::backoff && e.delay_s >= release_worker_after_s &&
        s.kept_worker) {
      self->demonitor(s.kept_worker);
      self->send(std::exchange(s.kept_worker, nullptr), release_atom::value);
    }
    // A timer that is due at once (a zero backoff) is a message to itself:
    // CAF's clock would take a lock and wake its thread for it.
    auto fire = [&](auto... xs) {
      if (e.delay_s > 0)
        self->delayed_send(self, to_duration(e.delay_s), xs...);
      else
        self->send(self, xs...);
    };
    if (e.kind == timer_kind::attempt)
      fire(attempt_timer_atom::value, e.generation);
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

  void operator()(const effect::attempt_exited& e) const {
    emit(self, attempt_exited_event(st().head(), e.outcome));
  }

  void operator()(const effect::classified& e) const {
    auto& s = st();
    emit(self, classified_event(s.head(), e.result));
    if (!s.run)
      return;
    // What the next attempt is told.
    auto& run = *s.run;
    run.failed = true;
    run.failed_attempt = s.m.attempt;
    run.reason =
      std::string{to_string(e.result.cls)} + " (rule " + e.result.rule + ")";
    if (!e.result.line.empty())
      run.reason += ": " + e.result.line;
    auto own = e.result.cls == error_class::gate_failed ||
               e.result.cls == error_class::preflight_failed;
    run.lines = own ? run.step_tail : run.attempt_tail;
  }

  void operator()(const effect::retry_scheduled& e) const {
    auto& s = st();
    const auto& cfg = s.machine().config();
    emit(self, retry_scheduled_event(
                 s.head(), e.plan.retry_count, cfg.max_retries_per_agent,
                 s.agent().agent_id, e.delay, describe(e.plan, cfg)));
  }

  void operator()(const effect::agent_switched& e) const {
    auto& s = st();
    emit(self,
         agent_switched_event(s.head(), s.agent(e.from).agent_id,
                              s.agent(e.switched.agent_index).agent_id,
                              describe(e.switched, s.machine().config())));
  }

  void operator()(const effect::user_stopped& e) const {
    const char* text = e.skipped_retry ? "retry skipped due to user stop"
                       : e.mode == stop_request::kill ? "user_kill requested"
                                                      : "user_cancel requested";
    emit(self, user_stop_event(st().head(), to_stop_mode(e.mode), text));
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
    r.error = describe(e, s.machine().config());
    if (s.run) {
      // The change is always an artifact.
      auto patch = s.run->attempt_dir + "/change.patch";
      std::error_code ec;
      if (!s.run->attempt_dir.empty() && std::filesystem::exists(patch, ec))
        r.artifacts.push_back(patch);
      s.run->cancel->store(true);
      drop_worktree(self, true,
                    e.outcome != end_kind::succeeded || s.run->failed);
    }
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
    self->send(s.parent, escalate_atom::value, std::move(r));
    emit(self, escalated_event(s.head(false), outcome,
                               caf::to_string(s.parent.address())));
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

/// Carries out `fx`, then feeds the inputs they produced at once.
void carry(supervisor_actor* self, const machine_effects& fx) {
  // A vector, which allocates only when an input is produced (rarely): an
  // empty std::deque allocates twice, and this runs several times per
  // attempt.
  std::vector<machine_input> next;
  for (auto& e : fx)
    std::visit(carrier{self, next}, e);
  for (auto& in : next)
    drive(self, std::move(in));
}

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
  if constexpr (is_one_of<T, start_attempt, adopt_attempt, stop_attempt,
                          run_preflight, run_gates>)
    return reach::outside;
  else if constexpr (is_one_of<T, deliver, finish>)
    return reach::told;
  else if constexpr (is_one_of<T, release_slot, report_agent, attempt_exited,
                               classified, retry_scheduled, agent_switched,
                               user_stopped, deadline_passed, attempt_timed_out,
                               voluntary_end>)
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
bool drive(supervisor_actor* self, machine_input in, after_input then) {
  auto& st = self->state;
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

/// Drives `in` and answers the request once its effects are carried out.
caf::result<bool> drive_and_reply(supervisor_actor* self, machine_input in) {
  if (!self->state.journal)
    return drive(self, std::move(in));
  auto rp = self->make_response_promise<bool>();
  drive(self, std::move(in), [rp](bool ok) mutable { rp.deliver(ok); });
  return rp;
}

/// The attempt ended: the machine keeps what judging needs, the carrier the
/// output tail for the classifier.
void attempt_ended(supervisor_actor* self, int attempt, attempt_outcome out) {
  drive(self, ended_input(self, attempt, std::move(out)));
}

input::attempt_ended ended_input(supervisor_actor* self, int attempt,
                                 attempt_outcome out) {
  auto& st = self->state;
  st.worker = nullptr;
  st.worker_node.clear();
  input::attempt_ended in;
  in.attempt = attempt;
  if (out.started && out.exit_code == 0) {
    std::error_code ec;
    in.done_file = std::filesystem::exists(
      detail::done_file(attempt_dir_of(st, attempt)), ec);
  }
  if (st.run && !out.succeeded())
    st.run->attempt_tail.assign(out.tail.size() > 200 ? out.tail.end() - 200
                                                      : out.tail.begin(),
                                out.tail.end());
  if (!out.succeeded() && st.journal) {
    // The journal keeps the tail, so a restarted node can classify again.
    in.outcome = out;
    st.to_classify = std::move(out);
  } else if (!out.succeeded()) {
    // The machine gets the outcome without its tail (not a copy of it); the
    // classifier gets the whole outcome.
    auto tail = std::move(out.tail);
    out.tail.clear();
    in.outcome = out;
    out.tail = std::move(tail);
    st.to_classify = std::move(out);
  } else {
    in.outcome = std::move(out);
  }
  return in;
}

task_status status_of(supervisor_actor* self) {
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

/// Moves aside the attempt directories of this task beyond its last
/// recorded attempt: their start was committed but not yet on disk when the
/// machine went down (the attempts died with it), and their numbers are
/// given again. `attempt-<n>` becomes `attempt-<n>.unrecorded` (`-2`, `-3`,
/// ... if taken): attempt directories are never reused.
void set_aside_unrecorded(const supervisor_state& s) {
  namespace fs = std::filesystem;
  if (s.node->attempt_root.empty())
    return;
  auto dir = fs::path{s.node->attempt_root} / s.task_id();
  std::vector<fs::path> unrecorded;
  std::error_code ec;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end;
       it.increment(ec)) {
    auto name = it->path().filename().string();
    constexpr std::string_view prefix = "attempt-";
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        !std::all_of(name.begin() + prefix.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (std::stoi(name.substr(prefix.size())) > s.m.attempt)
      unrecorded.push_back(it->path());
  }
  for (auto& from : unrecorded) {
    auto to = from.string() + ".unrecorded";
    for (int k = 2; fs::exists(to, ec) && k < 1000; ++k)
      to = from.string() + ".unrecorded-" + std::to_string(k);
    fs::rename(from, to, ec);
    std::fprintf(stderr,
                 "tasksup: task '%s': %s has no record in the journal (the "
                 "machine went down before it was on disk); %s\n",
                 s.task_id().c_str(), from.c_str(),
                 ec ? ("cannot move it aside: " + ec.message()).c_str()
                    : ("moved to " + to).c_str());
  }
}

/// Rebuilds the task from its journaled inputs (carrying nothing out
/// again), then resumes it: what it waited for is asked for again.
void resume(supervisor_actor* self, std::vector<journaled_input> replay) {
  auto& st = self->state;
  machine_effects fx;
  for (auto& r : replay) {
    fx.clear();
    st.machine().handle(st.m, r.in, r.at_s, fx);
    ++st.journal_n;
    // The span ids follow the attempts, as they did.
    for (auto& e : fx)
      if (std::holds_alternative<effect::start_attempt>(e))
        st.span = st.ids->span_id();
    if (auto* end = std::get_if<input::attempt_ended>(&r.in);
        end && !end->outcome.succeeded())
      st.to_classify = std::move(end->outcome);
    if (auto* started = std::get_if<input::attempt_started>(&r.in))
      st.adopt_id = started->runtime_id;
  }
  set_aside_unrecorded(st);
  if (st.m.phase == task_phase::done) {
    // The task ended just before the restart; its end was not recorded.
    std::vector<machine_input> none;
    for (auto& e : fx)
      if (std::holds_alternative<effect::finish>(e))
        std::visit(carrier{self, none}, e);
    return;
  }
  drive(self, input::resumed{}, [self](bool) {
    auto& st = self->state;
    if (st.node->services)
      self->send(st.node->services, resumed_atom::value, st.task_id(),
                 st.adopted_dir, st.worker ? st.adopt_id : std::string{},
                 st.worker ? st.adopted_attempt : 0);
  });
}

caf::behavior task_supervisor_actor(supervisor_actor* self, caf::actor parent,
                                    std::unique_ptr<const task_settings> opts,
                                    std::shared_ptr<const shared_settings> node,
                                    start_info start) {
  auto& st = self->state;
  st.parent = std::move(parent);
  st.opts = std::move(opts);
  st.node = std::move(node);
  st.ids.emplace(start.ids);
  st.journal = std::move(start.journal);
  st.journal_seq = start.journal_seq;
  st.task_span = st.ids->span_id();
  st.m = st.machine().initial();
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
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (st.kept_worker && dm.source == st.kept_worker.address()) {
      st.kept_worker = nullptr; // gone between attempts: the next spawns one
      return;
    }
    if (!st.worker || dm.source != st.worker.address())
      return;
    if (!st.worker_node.empty() &&
        dm.reason == caf::exit_reason::remote_link_unreachable) {
      // Its node is gone (killed, frozen, cut off): the attempt is lost
      // with it, and no attempt goes there any more.
      auto node = st.worker_node;
      if (st.node->services)
        self->send(st.node->services, node_lost_atom::value, node,
                   st.worker.node());
      attempt_ended(self, st.m.attempt,
                    lost_outcome(node, "the connection to it failed (" +
                                         self->system().render(dm.reason) +
                                         ")"));
      return;
    }
    if (!st.worker_node.empty()) {
      // Its last messages may still be on their way: judged after a grace.
      self->delayed_send(self, remote_report_grace, worker_gone_atom::value,
                         st.m.attempt);
      return;
    }
    // The worker died without reporting its exit: the machinery failed.
    attempt_outcome out;
    out.exit_code = -1;
    out.infrastructure_error =
      "container worker died: " + self->system().render(dm.reason);
    attempt_ended(self, st.m.attempt, std::move(out));
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
    [=](attempt_exited_atom, attempt_report& r) {
      auto& st = self->state;
      if (!from_worker(self) || r.attempt != st.m.attempt)
        return;
      if (st.worker_node.empty())
        st.kept_worker = st.worker; // it waits for the next attempt
      else
        self->demonitor(st.worker);
      // Its node is stopping: nothing more goes there.
      if (!r.outcome.lost_node.empty() && !st.worker_node.empty() &&
          st.node->services)
        self->send(st.node->services, node_lost_atom::value, st.worker_node,
                   st.worker.node());
      attempt_ended(self, r.attempt, std::move(r.outcome));
    },
    [=](start_atom, int attempt, std::string& runtime_id) {
      // The worker's attempt runs under this pid / container id: journaled,
      // so that a restarted node can adopt it.
      auto& st = self->state;
      if (!from_worker(self) || !st.journal)
        return;
      if (!st.worker_node.empty())
        runtime_id = remote_runtime_id(st.worker_node, runtime_id);
      drive(self, input::attempt_started{attempt, std::move(runtime_id)});
    },
    [=](event_atom, event& ev) {
      // Worker events (attempt_started, log) pass through in order; only
      // the current worker's, about this task.
      if (!from_worker(self) || ev.task_id != self->state.task_id())
        return;
      self->send(self->state.parent, event_atom::value, std::move(ev));
    },
    [=](backoff_timer_atom, std::uint64_t gen) {
      drive(self, input::timer{timer_kind::backoff, gen});
    },
    [=](worker_gone_atom, int attempt) {
      auto& st = self->state;
      if (self->current_sender() != self->ctrl() || !st.worker ||
          st.worker_node.empty() || attempt != st.m.attempt)
        return;
      attempt_outcome out;
      out.exit_code = -1;
      out.infrastructure_error = "the container worker on node " +
                                 st.worker_node +
                                 " ended without reporting its attempt";
      attempt_ended(self, attempt, std::move(out));
    },
    [=](attempt_timer_atom, std::uint64_t gen) {
      drive(self, input::timer{timer_kind::attempt, gen});
    },
    [=](ws_done_atom, workspace_fn& reply) { reply(); },
    [=](stop_atom, stop_mode mode) {
      return drive_and_reply(self, input::stop{mode == stop_mode::kill
                                                 ? stop_request::kill
                                                 : stop_request::cancel});
    },
    [=](retry_now_atom) { return drive_and_reply(self, input::retry_now{}); },
    [=](force_fallback_atom) {
      return drive_and_reply(self, input::force_fallback{});
    },
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
  start.emit_submitted = opts.emit_submitted && !opts.resume;
  start.resume = opts.resume;
  start.replay = std::move(opts.replay);
  start.journal = std::move(opts.journal);
  start.journal_seq = opts.journal_seq;
  start_info::extras more;
  auto chain =
    build_agent_chain(task.selection, opts.default_agent, opts.start_agent_id);
  more.warnings = std::move(chain.warnings);
  more.classifier_rules = std::move(task.classifier_rules);
  if (!opts.backoff) {
    opts.backoff = spawn_backoff(sys, opts.seed);
    more.owned.push_back(caf::actor_cast<caf::actor>(opts.backoff));
  }
  if (!opts.classifier) {
    if (auto rules = classifier::make(default_classifier_rules())) {
      opts.classifier = spawn_classifier(sys, std::move(*rules));
      more.owned.push_back(caf::actor_cast<caf::actor>(opts.classifier));
    }
  }
  if (!more.warnings.empty() || more.classifier_rules || !more.owned.empty())
    start.more = std::make_unique<start_info::extras>(std::move(more));
  std::vector<std::string> providers;
  for (auto& a : chain.agents)
    providers.push_back(a.provider);
  shared_settings node{detail::shared_config(effective_settings(task)),
                       std::move(providers)};
  node.agents = detail::shared_agents(std::move(chain.agents));
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
  if (task.repo || !task.gates.empty() || task.preflight ||
      task.feedback.enabled) {
    auto h = std::make_unique<detail::task_settings::hook_fields>();
    h->repo = std::move(task.repo);
    h->keep_failed = task.keep_failed;
    h->gates = std::move(task.gates);
    h->deliver = task.deliver;
    h->feedback = std::move(task.feedback);
    h->preflight = std::move(task.preflight);
    settings->hooks = std::move(h);
  }
  return sys.spawn(task_supervisor_actor, std::move(parent),
                   std::unique_ptr<const task_settings>{std::move(settings)},
                   detail::shared_node(std::move(node)), std::move(start));
}

} // namespace tasksup

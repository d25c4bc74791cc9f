#pragma once

// The task supervisor's state, and what its parts share. Internal to the
// actors library.
//
//   task_supervisor_actor.cpp  carries the machine: messages into inputs,
//                              effects into sends, requests and timers;
//   supervisor_link.cpp        the attempt's worker, here or on a worker
//                              node: started, stopped, lost, ended;
//   supervisor_hooks.cpp       repository, preflight, gates, feedback and
//                              delivery, on the task's workspace thread;
//   supervisor_resume.cpp      a task rebuilt from its journaled inputs.

#include "call_table.hpp"
#include "task_settings.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/workspace.hpp"
#include "tasksup/supervisor/task_machine.hpp"

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

/// A job on a task's workspace thread (false: the last one, the thread
/// ends), or a reply run back on the supervisor. Filed in a `call_table`;
/// the messages carry its number.
using workspace_fn = std::function<bool()>;
using workspace_calls = call_table<bool>;

/// Supervisor -> its workspace thread: `(ws_job, number)`, run the job.
using ws_job_atom = caf::atom_constant<caf::atom("wsjob")>;
/// Workspace thread -> supervisor: `(ws_done, number)`, run a job's reply.
using ws_done_atom = caf::atom_constant<caf::atom("wsdone")>;
/// Supervisor -> itself: its timers (`task_machine`'s, by generation), and
/// `(worker_gone, attempt)`: a remote worker went down while its node
/// stayed connected and its report has had time to arrive.
using attempt_timer_atom = caf::atom_constant<caf::atom("attempttmr")>;
using quota_timer_atom = caf::atom_constant<caf::atom("quotatmr")>;
using worker_gone_atom = caf::atom_constant<caf::atom("workergone")>;

/// A task's workspace thread: runs its jobs one after the other.
using workspace_actor =
  caf::typed_actor<caf::reacts_to<ws_job_atom, std::uint64_t>>;

/// A task supervisor's interface and its own messages (timers, replies from
/// its workspace thread).
using supervisor_impl = task_supervisor_actor::extend<
  caf::reacts_to<deadline_atom>,
  caf::reacts_to<backoff_timer_atom, std::uint64_t>,
  caf::reacts_to<attempt_timer_atom, std::uint64_t>,
  caf::reacts_to<quota_timer_atom, std::uint64_t>,
  caf::reacts_to<worker_gone_atom, int>,
  caf::reacts_to<ws_done_atom, std::uint64_t>>;

/// What a task with a repository, gates, a preflight or feedback keeps
/// while it runs.
struct hook_run {
  /// The workspace thread, spawned on first use, and its jobs.
  workspace_actor ws;
  std::shared_ptr<workspace_calls> jobs = std::make_shared<workspace_calls>();
  /// The jobs' replies, run back on the supervisor.
  std::shared_ptr<workspace_calls> replies =
    std::make_shared<workspace_calls>();
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

/// What the supervisor needs only while it starts.
struct start_info {
  /// The rarely present start-only inputs, behind one pointer.
  struct extras {
    /// Problems found while building the agent chain.
    std::vector<std::string> warnings;
    /// The task's own classifier rules, handed to the classifier at start.
    std::optional<std::vector<classifier_rule>> classifier_rules;
    /// Helpers spawned for this supervisor alone (stopped when it ends).
    std::vector<caf::actor_addr> owned;
  };
  /// Null when there are none.
  std::unique_ptr<extras> more;
  /// Already past the trace id, when that was generated.
  trace_id_generator ids{0};
  bool emit_submitted = true;
  bool event_batches = false;
  /// For a task rebuilt after a node restart: its journaled inputs.
  bool resume = false;
  std::vector<journaled_input> replay;
  journal_actor journal;
  std::int64_t journal_seq = 0;
  /// Attempts of the task's earlier runs (a group member's rerun).
  int attempts_before = 0;
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

/// A task supervisor's state: the machine's state, and what carrying it out
/// needs (its settings, its worker, its journal, its hooks).
struct supervisor_state {
  task_parent_actor parent;
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
  container_worker_actor worker;
  /// Where the next attempt runs, as the registry placed it: a worker
  /// node's name and agent (empty and null: on this node).
  std::string placed_node;
  node_agent_actor placed_agent;
  std::string placed_runtime;
  /// The worker node of `worker` (empty: this node).
  std::string worker_node;
  /// This node's worker of the last attempt, kept (and monitored) for the
  /// next one: one actor per task instead of one per attempt.
  container_worker_actor kept_worker;
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
  /// The parent takes events in batches: `emit` holds them in `outbox`
  /// while an input is driven or a request to the classifier or the backoff
  /// actor is out (`asking`), and `flush_events` sends them when neither is
  /// (BENCHMARKS.md §9).
  bool event_batches = false;
  int driving = 0;
  int asking = 0;
  std::vector<event> outbox;
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

using supervisor_actor = supervisor_impl::stateful_pointer<supervisor_state>;

/// What a supervisor starts with, built from its options on the spawning
/// thread: the task's own settings in one block, what it has in common with
/// other tasks from the pools, and the start-only inputs, dropped once it
/// has started (BENCHMARKS.md §2).
struct supervisor_setup {
  std::unique_ptr<const task_settings> settings;
  std::shared_ptr<const shared_settings> node;
  start_info start;
};

/// Builds a supervisor's setup from `opts`, spawning the backoff and
/// classifier actors the options do not name (owned by the supervisor).
supervisor_setup make_setup(caf::actor_system& sys, supervisor_options opts);

/// Sends `ev` to the supervisor's parent (the registry), or holds it in the
/// outbox (see `supervisor_state::outbox`).
void emit(supervisor_actor self, event ev);

/// Sends the events held in the outbox, in one message.
void flush_events(supervisor_actor self);

/// Called once an input's effects were carried out, with whether it took
/// effect.
using after_input = std::function<void(bool)>;

/// Feeds `in` to the machine and carries out its effects (with a journal,
/// once `in` is recorded). Returns whether `in` took effect; `then` runs
/// after its effects.
bool drive(supervisor_actor self, machine_input in, after_input then = {});

/// Carries out `fx`, then feeds the inputs they produced at once.
void carry(supervisor_actor self, const machine_effects& fx);

/// The attempt `attempt` ended with `out`.
void attempt_ended(supervisor_actor self, int attempt, attempt_outcome out);

/// The machine's input for the end of `attempt` (the carrier keeps the
/// output tail for the classifier).
input::attempt_ended ended_input(supervisor_actor self, int attempt,
                                 attempt_outcome out);

/// `<attempt_root>/<task id>/attempt-<n>`, as make_attempt_spec names it.
std::string attempt_dir_of(const supervisor_state& s, int attempt);

// -- the attempt's worker (supervisor_link.cpp) ------------------------------

/// Starts the attempt whose spec is ready: on the worker node the registry
/// placed it on, else on this node (the kept worker, or a new one).
void spawn_worker(supervisor_actor self, runtime::attempt_spec spec,
                  std::size_t agent_index);

/// After a restart: takes over the attempt the journal says was running.
/// Returns its end at once when it ran on a worker node (lost with this
/// node's restart).
std::optional<input::attempt_ended>
adopt_worker(supervisor_actor self, std::size_t agent_index, int attempt);

/// Stops the current attempt (or the one a worker node is starting, once it
/// answers).
void stop_worker(supervisor_actor self, stop_mode mode,
                 std::chrono::milliseconds grace);

/// Lets the worker kept for the next attempt go (a long backoff).
void release_kept_worker(supervisor_actor self);

/// Whether the current message comes from the current attempt's worker (or
/// the worker node starting it, which then becomes the worker).
bool from_worker(supervisor_actor self);

/// The worker's report of its attempt's end.
void worker_reported(supervisor_actor self, attempt_report& r);

/// The runtime id of the current attempt, as the journal keeps it.
std::string journaled_runtime_id(const supervisor_state& s,
                                 std::string runtime_id);

/// A worker (or the one kept) went down.
void worker_down(supervisor_actor self, const caf::down_msg& dm);

/// A remote worker ended and its report did not arrive within the grace.
void worker_gone(supervisor_actor self, int attempt);

// -- repository, preflight, gates, delivery (supervisor_hooks.cpp) -----------

/// A task with hooks: feedback into the spec, then (repository tasks) a
/// fresh worktree at the base, then the worker.
void prepare_attempt(supervisor_actor self, runtime::attempt_spec spec,
                     std::size_t agent_index, int attempt);

/// Runs the preflight command before attempt `attempt`.
void run_preflight(supervisor_actor self, int attempt);

/// Captures attempt `attempt`'s change, then runs the gates on it.
void run_gates(supervisor_actor self, int attempt);

/// Delivers attempt `attempt`'s change as the task says.
void deliver_change(supervisor_actor self, int attempt);

/// What the next attempt is told of the failed one.
void remember_failure(supervisor_actor self, const classification& c);

/// The task ends: its change (when there is one) joins `artifacts`, running
/// hooks are cancelled, the worktree goes (or is kept when it failed).
void end_hooks(supervisor_actor self, bool failed,
               std::vector<std::string>& artifacts);

// -- after a restart (supervisor_resume.cpp) ---------------------------------

/// Rebuilds the task from its journaled inputs (carrying nothing out
/// again), then resumes it: what it waited for is asked for again.
void resume(supervisor_actor self, std::vector<journaled_input> replay);

} // namespace tasksup::detail

#pragma once

// Internal to tasksup::actors: the registry's state and the functions its
// files share (registry_actor.cpp: the behavior, results and control;
// registry_submit.cpp: accepting tasks; registry_restore.cpp: rebuilding
// them after a restart; registry_nodes.cpp: worker nodes;
// registry_logs.cpp: attempt logs). Its children: the event hub
// (event_hub.hpp), the node membership (node_membership.hpp) and, on a
// node, the scheduler (schedule_actor.hpp). See
// docs/ARCHITECTURE.md, "The registry".

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/group_supervisor_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"
#include "tasksup/actors/schedule_actor.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "actor_now.hpp"
#include "event_hub.hpp"
#include "node_membership.hpp"

#include "tasksup/supervisor/account_quotas.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/retry_budget.hpp"
#include "tasksup/supervisor/slot_scheduler.hpp"

#include <caf/response_promise.hpp>
#include <caf/result.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

/// A task whose supervisor is alive.
struct active_task {
  task_supervisor_actor supervisor;
  std::string environment;
  std::string trace_id;
  /// What its attempts need from a worker node.
  placement_request placement;
  /// Its attempts run here whatever nodes joined (repository tasks).
  bool local_only = false;
  /// Attempts of its earlier runs (a group member's rerun).
  int attempts_before = 0;
};

/// A group the registry runs: the top of a tree submitted as a group
/// document, or a group nested in one.
struct group_record {
  /// The id of its tree's top group (its own for a top group).
  std::string top;
  /// A top group's spec and supervisor (null once it ended).
  std::shared_ptr<const group_spec> spec;
  group_supervisor_actor supervisor;
  std::string trace_id;
  /// Its journal row (0: none).
  std::int64_t seq = 0;
  /// Set once the group ended, with its restart decisions in all and when.
  std::optional<task_result> result;
  std::uint64_t restarts = 0;
  double ended_at = 0;
  /// A best-of-N step's winner, the racer that succeeded first: set when
  /// the race ends, or when a restarted node reads in the race's journal
  /// that it was decided.
  std::string winner;
};

/// A worker node attempts can be placed on, as the membership reported it
/// (its offer and load are the slot scheduler's).
struct worker_node {
  node_agent_actor agent;
  double joined_at = 0;
};

/// A rebuilt task's adoption of the attempt it left running on worker node
/// `node` (any node when its journal does not say which), waiting for the
/// node to join again and hand it over.
struct pending_adoption {
  std::string node;
  int attempt = 0;
  attempt_owner_actor owner;
  caf::typed_response_promise<container_worker_actor, std::string> rp;
};

/// A finished task in `finished_order`: its id and when it finished.
struct finished_entry {
  std::string id;
  /// Wall-clock seconds.
  double at = 0;
};

/// A finished task retention removed: when, and why in words.
struct expired_task {
  double at = 0;
  std::string why;
};

/// Expired tasks remembered at most, for `status` to say when and why.
inline constexpr std::size_t max_expired_kept = 10000;

struct registry_state {
  registry_options opts;
  /// The timer its tasks' container workers share.
  std::function<void(double, std::function<void()>)> worker_timer;
  classifier_actor classifier;
  backoff_actor backoff;
  std::optional<trace_id_generator> ids;
  std::map<std::string, active_task> active;
  std::map<caf::actor_addr, std::string> by_supervisor;
  /// Finished tasks, oldest first in `finished_order`.
  std::map<std::string, task_status> finished;
  std::deque<finished_entry> finished_order;
  /// The tasks retention removed most recently, oldest first in
  /// `expired_order`.
  std::map<std::string, expired_task> expired;
  std::deque<std::string> expired_order;
  /// A `(save_expired)` is on its way.
  bool expired_unsaved = false;
  std::map<std::string, std::vector<caf::typed_response_promise<task_result>>>
    awaiting;
  /// What waits for an active task's record (`when_finished`).
  std::map<std::string, std::vector<std::function<void(const task_status*)>>>
    finishing;
  std::optional<circuit_breaker> breaker;
  /// Accounts closed until their usage quota resets.
  account_quotas quotas;
  retry_budget budget;
  /// Who holds the attempt slots, where, and who waits.
  slot_scheduler slots;
  /// The permits of the tasks waiting for a slot, answered when the
  /// scheduler grants one.
  std::map<std::string,
           std::pair<permit_request, caf::typed_response_promise<permit_reply>>>
    waiting;
  /// The worker node each task's attempts were last placed on (tasks whose
  /// attempts all ran here have none), for `logs`.
  std::map<std::string, std::string> placed_on;
  /// The worker nodes that joined, by name (the membership's report).
  std::map<std::string, worker_node> nodes;
  /// Which worker nodes joined: checks joins, watches their agents.
  detail::node_membership_actor membership;
  /// Round-robin position per environment.
  std::map<std::string, std::size_t> rotation;
  /// The events: each task's history, subscribers, the journal's copy.
  detail::event_hub_actor hub;
  /// The schedules' scheduler (a node's; null for `tasksup run`).
  scheduler_actor scheduler;
  /// The supervisors of `active`, shared with the exit handler that stops
  /// them when the registry ends.
  std::shared_ptr<std::map<std::string, task_supervisor_actor>> supervisors;
  /// The supervisors of the running top groups, likewise.
  std::shared_ptr<std::map<std::string, group_supervisor_actor>>
    group_supervisors;
  std::uint64_t next_number = 1;
  /// The journal's number of every task it records.
  std::map<std::string, std::int64_t> journal_seq;
  /// Ids being recorded by the journal (not yet answered).
  std::set<std::string> reserved;
  /// Rebuilt tasks that have not yet asked again for what they waited for;
  /// the slot queue is held until none is left, then served in submission
  /// order.
  std::set<std::string> resuming;
  /// What the rebuilt tasks adopted (attempt directories and runtime ids):
  /// left alone when the rest of the old node's attempts are reaped.
  std::set<std::string> adopted;
  /// The attempts they adopted, as (task id, attempt number).
  std::set<std::pair<std::string, int>> adopted_attempts;
  /// Rebuilt tasks waiting for a worker node to join again to adopt their
  /// attempt there, by task id.
  std::map<std::string, pending_adoption> adopting;
  /// Ids of tasks whose admission checks run (not queued yet).
  std::set<std::string> admitting;
  /// The groups, top and nested, by id.
  std::map<std::string, group_record> groups;
  /// Every id of a running tree (its groups and tasks) -> its top group's
  /// id: held from the tree's submission until its top group ends.
  std::map<std::string, std::string> in_tree;
  /// The task members whose runs a group started -> that group's
  /// supervisor: each run's end goes there.
  std::map<std::string, group_supervisor_actor> member_of;
  /// The run token of each group member task's last run (journaled with
  /// it): a start of a run seen before is answered as that run went.
  std::map<std::string, std::int64_t> member_runs;
  static inline const char* name = "tasksup.registry";
};

/// `(worker_wait)`, the registry to itself: the wait for the worker nodes
/// after a restart is over (registry_options::worker_wait_s).
using worker_wait_atom = caf::atom_constant<caf::atom("workerwait")>;

/// `(save_expired)`, the registry to itself: journal the tasks retention
/// removed (at most once a second, `expired_save_delay`).
using save_expired_atom = caf::atom_constant<caf::atom("saveexpd")>;

/// How long the registry gathers expiries before it journals them, and how
/// many of the newest it journals (node state "expired"): a restarted node
/// still says when and why those expired.
inline constexpr std::chrono::seconds expired_save_delay{1};
inline constexpr std::size_t max_expired_saved = 1000;

/// The registry as its children see it: the public interface, what the
/// membership reports, and its own timers.
using registry_impl =
  registry_actor::extend_with<membership_listener_actor>::extend_with<
    group_parent_actor>::extend<caf::reacts_to<worker_wait_atom>,
                                caf::reacts_to<save_expired_atom>,
                                caf::reacts_to<adopt_end_atom, std::string>>;

using registry_ptr = registry_impl::stateful_pointer<registry_state>;

/// Seconds since the Unix epoch, for the journal's records.
inline double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// -- registry_actor.cpp -------------------------------------------------------

/// Hands `ev` to the event hub.
void publish(registry_ptr self, const event& ev);

/// The hub forgets `task_id`'s events (it is evicted or forgotten).
void untrack(registry_ptr self, const std::string& task_id);

/// Records a piece of node state in the journal.
void save_state(registry_ptr self, const char* key, std::string text);

/// Answers the waiting permits the scheduler granted.
void deliver(registry_ptr self, std::vector<slot_grant> grants);

/// Records a final result; answers everyone awaiting it.
void record_result(registry_ptr self, task_result r);

/// Drops the finished tasks retention no longer keeps as of `now`: beyond
/// `history_limit` (the oldest first) or older than `history_max_age_s`.
/// Each is dropped from the journal too and remembered in `expired`.
void expire_finished(registry_ptr self, double now);

/// Where a task runs or why it waits, added to its supervisor's status.
void add_placement(registry_ptr self, task_status& s);

/// Runs `f` with `id`'s record once its result is recorded: at once when it
/// is, or when the result the supervisor sent before it ended has come
/// through the hub. Null for a task that is not known at all.
void when_finished(registry_ptr self, const std::string& id,
                   std::function<void(const task_status*)> f);

/// The newest `max_expired_saved` expired tasks as the journal keeps them:
/// one "id\tat\twhy\n" line each, oldest first.
std::string encode_expired(const registry_state& st);

/// Reads what `encode_expired` wrote into `st.expired` (bad lines skipped).
void restore_expired(registry_state& st, std::string_view text);

/// The error for a task id the registry does not know: when and why
/// retention removed it, if it did.
caf::error unknown_task_error(const registry_state& st,
                              const std::string& task_id);

// -- registry_status.cpp ------------------------------------------------------

/// Asks the supervisors of the active tasks `ids` for their status and
/// calls `done` with the answers (a task that finished meanwhile answers
/// with its record; one that is gone, not at all), at once when `ids` is
/// empty.
void ask_statuses(registry_ptr self, std::vector<std::string> ids,
                  std::function<void(std::map<std::string, task_status>)> done);

/// Every task and group, the finished first (oldest first) when no task
/// is active, else all in ascending id order.
caf::result<std::vector<task_status>> all_status(registry_ptr self);

/// One page of the tasks and groups `q` admits, in ascending id order.
/// Only the supervisors of the page's tasks are asked, unless the filter
/// needs the state or agent of every unfinished task.
caf::result<status_page> status_page_of(registry_ptr self,
                                        const status_query& q);

// -- registry_submit.cpp ------------------------------------------------------

/// Spawns the supervisor of a prepared task; `last_event` and `restored`
/// describe a task rebuilt after a restart (its journaled events).
void launch(registry_ptr self, supervisor_options opts, std::string environment,
            std::int64_t last_event = 0, bool restored = false);

/// Forgets a finished task that is submitted again (`--replace`): its
/// attempt directories move aside (`<id>.replaced-<n>`).
void forget(registry_ptr self, const std::string& task_id);

/// Accepts a task (checked, admitted, journaled) -> its id.
caf::result<std::string> submit(registry_ptr self, task_spec task,
                                bool replace = false);

/// What a submission learns in the end: the task's id, or why it was
/// refused.
using submitted_fn = std::function<void(caf::expected<std::string>)>;

/// Accepts `task` (checked, admitted, journaled) and calls `done`. A
/// nonzero `member_run` makes it that run of a group's task member: its id
/// is the tree's, and a rerun keeps its attempt directories, state
/// directory and history.
void submit_into(registry_ptr self, task_spec task, bool replace, bool admitted,
                 std::int64_t member_run, submitted_fn done);

/// Accepts a task file's text -> its id.
caf::result<std::string> submit_json(registry_ptr self, const std::string& text,
                                     bool replace);

/// `tasksup forget` of a finished task -> whether it was forgotten.
caf::result<bool> forget_finished(registry_ptr self,
                                  const std::string& task_id);

// -- registry_restore.cpp -----------------------------------------------------

/// Rebuilds the node's tasks from the journal.
void restore(registry_ptr self);

/// A rebuilt task has asked again for what it waited for (or ended).
void resumed(registry_ptr self, const std::string& task_id);

// -- registry_nodes.cpp -------------------------------------------------------

/// Worker node `offer.name` joined (the membership checked its offer): its
/// slots serve the queue.
void node_joined(registry_ptr self, node_offer& offer, node_agent_actor& agent);

/// Worker node `name` is gone, for `why`: nothing is placed there any more.
void node_left(registry_ptr self, const std::string& name,
               const std::string& why);

/// Rebuilt task `task_id` adopts its attempt `attempt` that ran on worker
/// node `node` (empty: on some worker node) when the coordinator went down:
/// once the node joined (again), its agent hands `owner` the attempt's
/// container worker. Answers that worker and its node, or an error when the
/// node does not hand it over within `registry_options::worker_wait_s` (or says
/// it no longer has it).
caf::result<container_worker_actor, std::string>
adopt(registry_ptr self, std::string task_id, std::string node, int attempt,
      attempt_owner_actor owner);

/// `task_id`'s wait for its worker node is over (`adopt_end`).
void adoption_timed_out(registry_ptr self, const std::string& task_id);

/// Every rebuilt task has asked for what it adopts: the worker nodes that
/// joined are told (`adopt_end`), and stop what they kept and nobody claimed.
void adoptions_claimed(registry_ptr self);

// -- registry_logs.cpp --------------------------------------------------------

// -- registry_groups.cpp ------------------------------------------------------

/// Accepts a group document's tree: every id is held for it, then its top
/// group starts -> the top group's id.
caf::result<std::string> submit_group(registry_ptr self, group_spec spec,
                                      bool replace, std::string document);

/// Rebuilds the groups of the journal's trees: ended ones as they ended,
/// running ones resume (each group replays its inputs and finds its members
/// again). Called after the tasks are rebuilt.
void restore_groups(registry_ptr self, std::vector<journal_group_entry> groups);

/// `(member_start, group, task, run)` of a group supervisor: runs the
/// member (its first run, or a rerun), or finds the run `run` again (a
/// group resumed after a restart) -> whether it runs (or ran).
caf::result<bool> start_member(registry_ptr self, task_spec task,
                               std::int64_t run);

/// `(member_stop, id, grace)`: stops a running member.
void stop_member(registry_ptr self, const std::string& task_id, double grace_s);

/// A task's run ended: when it is a group's member, the group learns how.
void member_run_ended(registry_ptr self, const task_result& r);

/// A top group's supervisor went down: a group that had not ended failed.
void group_down(registry_ptr self, const caf::down_msg& dm);

/// Attempts the earlier runs of `task_id` used (its rerun numbers on).
int attempts_used(registry_ptr self, const std::string& task_id);

/// A `group` event of one of the registry's groups: an end is recorded.
void group_event_seen(registry_ptr self, const event& ev);

/// `tasksup forget` of an ended top group: it, its nested groups and its
/// tasks are forgotten -> whether they were (false while it runs).
caf::result<bool> forget_group(registry_ptr self, const std::string& id);

/// `status` of a group id -> the group with its tree.
caf::result<task_status> group_status(registry_ptr self, const std::string& id);

/// `stop`/`kill` of a group id -> whether it was running.
caf::result<bool> stop_group(registry_ptr self, const std::string& id,
                             stop_mode mode);

/// The groups' rows for `status` of everything (no trees).
void add_group_status(registry_ptr self, std::vector<task_status>& out);

/// A chunk of an attempt's output log (see `logs_atom`).
using log_chunk = caf::result<int, std::uint64_t, std::string, bool>;

/// Reads up to 64 KiB of attempt `attempt`'s log (0: the latest) from
/// `offset`.
log_chunk read_log(registry_ptr self, const std::string& task_id, int attempt,
                   std::uint64_t offset);

} // namespace tasksup::detail

#pragma once

// The message interfaces of tasksup's actors, as typed handles: which
// messages each actor takes and what it answers. A handle is checked by the
// compiler where it is used; an actor's implementation may take more (its
// own timers), through a wider type its file keeps to itself.
//
// The message types are declared here and defined with their serialization
// in protocol.hpp, cluster.hpp and container_worker_actor.hpp.

#include "tasksup/actors/atoms.hpp"

#include "tasksup/supervisor/events.hpp"
#include "tasksup/supervisor/task_model.hpp"

#include <caf/node_id.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tasksup {

struct attempt_report;
struct attempt_options;
struct node_info;
struct schedule_request;
struct status_query;
struct status_page;
struct schedule_info;
struct node_offer;
struct task_spec;
struct remote_attempt;
struct permit_request;
struct permit_reply;

/// Takes a task's events, one by one or several in order.
using event_sink_actor =
  caf::typed_actor<caf::reacts_to<event_atom, event>,
                   caf::reacts_to<event_atom, std::vector<event>>>;

/// A task supervisor's parent (a registry's event hub, or an embedding
/// application's actor): the task's events, then its result, once.
using task_parent_actor =
  event_sink_actor::extend<caf::reacts_to<escalate_atom, task_result>>;

/// A client that subscribed to a node's events: each event, and
/// `(dropped, reason)` when the node sends it no more.
using subscriber_actor =
  caf::typed_actor<caf::reacts_to<event_atom, event>,
                   caf::reacts_to<dropped_atom, std::string>>;

/// Whom a container worker reports to (its task supervisor): the attempt's
/// runtime id once it runs, its events, and how it ended.
using attempt_owner_actor =
  caf::typed_actor<caf::reacts_to<start_atom, int, std::string>,
                   caf::reacts_to<event_atom, event>,
                   caf::reacts_to<attempt_exited_atom, attempt_report>>;

/// A container worker: runs one attempt at a time for its supervisor.
/// `(stop, mode, grace_ms)` ends the attempt; a kept worker between
/// attempts runs the next (`next_attempt`) or ends (`release`); its node's
/// agent ends the attempt as lost with the node (`node_lost`). On a worker
/// node, one whose supervisor became unreachable keeps its attempt for a
/// grace: its agent hands it to a new owner (`adopt`, owner), who has it
/// go on (`resume`).
using container_worker_actor = caf::typed_actor<
  caf::reacts_to<stop_atom, stop_mode, std::int64_t>,
  caf::reacts_to<next_attempt_atom, attempt_options>,
  caf::reacts_to<release_atom>, caf::reacts_to<node_lost_atom, std::string>,
  caf::reacts_to<adopt_atom, attempt_owner_actor>, caf::reacts_to<resume_atom>>;

/// A task supervisor: its worker's reports, and the control requests
/// (answered with whether they took effect) and its status.
using task_supervisor_actor =
  attempt_owner_actor::extend<caf::replies_to<stop_atom, stop_mode>::with<bool>,
                              caf::replies_to<retry_now_atom>::with<bool>,
                              caf::replies_to<pause_atom>::with<bool>,
                              caf::replies_to<resume_atom>::with<bool>,
                              caf::replies_to<force_fallback_atom>::with<bool>,
                              caf::replies_to<status_atom>::with<task_status>>;

/// A worker node's process, as its agent sees it: told when the
/// coordinator dropped the node (`node_left`, why), so that it joins again.
using node_process_actor =
  caf::typed_actor<caf::reacts_to<node_left_atom, std::string>>;

/// A worker node's agent (cluster.hpp): the node process tells it which
/// coordinator it joined; that coordinator's supervisors have it start
/// their attempts here; that coordinator tells it when it dropped the node
/// (`node_left`, why) although its connection holds, and reads it the log
/// of an attempt that ran here (`logs`: task, attempt, offset, whether the
/// task finished; as the registry answers `logs`); a coordinator that took
/// over hands itself the attempts this node kept for a lost one (`adopt`:
/// task, attempt, epoch, new owner -> the container worker) and says when
/// it has claimed them all (`adopt_end`); the node process stops it (->
/// true once its attempts ended) and asks how many run.
using node_agent_actor = caf::typed_actor<
  caf::reacts_to<join_atom, caf::node_id>,
  caf::reacts_to<node_left_atom, std::string>,
  caf::replies_to<logs_atom, std::string, int, std::uint64_t,
                  bool>::with<int, std::uint64_t, std::string, bool>,
  caf::replies_to<run_attempt_atom, remote_attempt,
                  attempt_owner_actor>::with<container_worker_actor>,
  caf::replies_to<adopt_atom, std::string, int, std::int64_t,
                  attempt_owner_actor>::with<container_worker_actor>,
  caf::reacts_to<adopt_end_atom>, caf::replies_to<stop_atom>::with<bool>,
  caf::replies_to<status_atom>::with<int>>;

/// What a node answers its clients (the registry itself, and its door on the
/// registry's behalf): submit (-> the task id), control requests on a task
/// (-> whether they took effect), `forget` a finished task, status (all,
/// one, or a page: `status_query`), an attempt's log, `await` a task's result,
/// subscriptions to the node's events (all, or one task's, answered with its
/// history so far), worker nodes that join (-> the node's name) or are listed,
/// and the node's schedules (schedule_actor.hpp).
using node_client_actor = caf::typed_actor<
  caf::replies_to<submit_atom, task_spec>::with<std::string>,
  caf::replies_to<submit_json_atom, std::string>::with<std::string>,
  caf::replies_to<submit_json_atom, std::string, bool>::with<std::string>,
  caf::replies_to<stop_atom, std::string, stop_mode>::with<bool>,
  caf::replies_to<retry_now_atom, std::string>::with<bool>,
  caf::replies_to<force_fallback_atom, std::string>::with<bool>,
  caf::replies_to<forget_atom, std::string>::with<bool>,
  caf::replies_to<pause_atom, std::string>::with<bool>,
  caf::replies_to<resume_atom, std::string>::with<bool>,
  caf::replies_to<status_atom>::with<std::vector<task_status>>,
  caf::replies_to<status_atom, std::string>::with<task_status>,
  caf::replies_to<status_atom, status_query>::with<status_page>,
  caf::replies_to<logs_atom, std::string, int,
                  std::uint64_t>::with<int, std::uint64_t, std::string, bool>,
  caf::replies_to<await_atom, std::string>::with<task_result>,
  caf::replies_to<subscribe_atom, subscriber_actor>::with<bool>,
  caf::replies_to<subscribe_atom, subscriber_actor,
                  std::string>::with<std::vector<event>>,
  caf::replies_to<unsubscribe_atom, subscriber_actor>::with<bool>,
  caf::replies_to<join_atom, node_offer, node_agent_actor>::with<std::string>,
  caf::replies_to<nodes_atom>::with<std::vector<node_info>>,
  caf::replies_to<schedule_atom,
                  schedule_request>::with<std::vector<schedule_info>>>;

/// What a task supervisor asks of its node (a registry): an attempt's
/// permit (slot, breaker, budget, quota), the slot back, what it learned
/// of agents, accounts and worker nodes, and, rebuilt after a restart,
/// what it took over (`resumed`) and the attempt it left on a worker node
/// (`adopt`: task, node or "" for any, attempt, owner -> the attempt's
/// container worker and its node).
using node_services_actor = caf::typed_actor<
  caf::replies_to<permit_atom, permit_request>::with<permit_reply>,
  caf::reacts_to<release_atom, std::string>,
  caf::reacts_to<reclaim_atom, std::string>,
  caf::reacts_to<resumed_atom, std::string, std::string, std::string, int>,
  caf::replies_to<adopt_atom, std::string, std::string, int,
                  attempt_owner_actor>::with<container_worker_actor,
                                             std::string>,
  caf::reacts_to<node_lost_atom, std::string, caf::node_id>,
  caf::reacts_to<close_account_atom, std::string, double>,
  caf::reacts_to<agent_result_atom, std::string, bool>>;

} // namespace tasksup

#pragma once

// The atoms of tasksup's messages: what each message is, and who sends it
// to whom. The actors' interfaces (interfaces.hpp) say which of them each
// actor takes, with what and what it answers.

#include <caf/atom.hpp>

namespace tasksup {

// -- atoms (10 characters at most)
// ---------------------------------------------

/// Client -> registry: `(submit, task_spec)` -> task id or error.
using submit_atom = caf::atom_constant<caf::atom("submit")>;
/// Client -> registry: `(submit_json, text)` -> task id or error; the node
/// parses and validates the task against its own configuration.
using submit_json_atom = caf::atom_constant<caf::atom("submitjson")>;
/// Client -> registry `(stop, task_id, stop_mode)`, registry -> supervisor
/// `(stop, stop_mode)`, supervisor -> worker `(stop, stop_mode, grace_ms)`.
using stop_atom = caf::atom_constant<caf::atom("stop")>;
/// Skip the remaining backoff: `(retry_now, task_id)` / `(retry_now)`.
using retry_now_atom = caf::atom_constant<caf::atom("retrynow")>;
/// Abandon the current agent: `(force_fb, task_id)` / `(force_fb)`.
using force_fallback_atom = caf::atom_constant<caf::atom("forcefb")>;
/// Pause a task (no further attempt starts) and resume it:
/// `(pause, task_id)` / `(pause)` -> bool, and the same with `resume`.
using pause_atom = caf::atom_constant<caf::atom("pause")>;
using resume_atom = caf::atom_constant<caf::atom("resume")>;
/// Supervisor -> registry: `(close_acct, account, until_s)`, the account's
/// quota is used up until `until_s` (the node's clock, wall scale).
using close_account_atom = caf::atom_constant<caf::atom("closeacct")>;
/// Forget a finished task: `(forget, task_id)` -> bool (false while it has
/// not finished); its status, history, journal record and attempt
/// directories go.
using forget_atom = caf::atom_constant<caf::atom("forget")>;
/// `(status)` -> vector<task_status>; `(status, task_id)` -> task_status.
using status_atom = caf::atom_constant<caf::atom("status")>;
/// `(subscribe, actor)`: stream every event to `actor` as `(event, event)`.
/// `(subscribe, actor, task_id)` -> the task's events so far
/// (`std::vector<event>`), then streams like the first form: a client that
/// subscribes right after `submit` misses nothing.
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
/// `(unsubscribe, actor)`: stop streaming events to `actor`.
using unsubscribe_atom = caf::atom_constant<caf::atom("unsubscr")>;
/// `(logs, task_id, attempt, offset)` -> `(attempt, next_offset, bytes,
/// complete)`: up to 64 KiB of the output log of attempt `attempt` (0: the
/// latest) from `offset`; `complete` once no more will be written to it.
using logs_atom = caf::atom_constant<caf::atom("logs")>;
/// `(await, task_id)` -> task_result once the task has finished.
using await_atom = caf::atom_constant<caf::atom("await")>;
/// Supervisor -> parent: `(escalate, task_result)`, the task's final result.
using escalate_atom = caf::atom_constant<caf::atom("escalate")>;
/// Any emitter -> its sink: `(event, event)`.
using event_atom = caf::atom_constant<caf::atom("event")>;
/// Worker -> supervisor: `(attempt_exited, attempt_report)`.
using attempt_exited_atom = caf::atom_constant<caf::atom("attexited")>;
/// A worker -> itself: `(start)` starts the attempt on the runtime.
using start_atom = caf::atom_constant<caf::atom("start")>;
/// Runtime callback -> worker: `(output, line)`.
using output_atom = caf::atom_constant<caf::atom("output")>;
/// Runtime callback -> worker: `(exit, attempt_outcome)`.
using exit_atom = caf::atom_constant<caf::atom("exit")>;
/// Supervisor -> classifier: `(classify, classify_request)` -> classification.
using classify_atom = caf::atom_constant<caf::atom("classify")>;
/// `(set_rules, rules)` replaces the classifier's default rules;
/// `(set_rules, task_id, rules)` sets one task's rules. -> bool or error.
using set_rules_atom = caf::atom_constant<caf::atom("setrules")>;
/// `(drop_rules, task_id)`: forget one task's rules.
using drop_rules_atom = caf::atom_constant<caf::atom("droprules")>;
/// Supervisor -> backoff: `(delay, delay_request)` -> delay_decision.
using delay_atom = caf::atom_constant<caf::atom("delay")>;
/// Supervisor -> itself: `(backoff_timer, generation)` ends a backoff wait.
using backoff_timer_atom = caf::atom_constant<caf::atom("bofftimer")>;
/// Supervisor -> registry: `(permit, permit_request)` -> `permit_reply`,
/// answered once an attempt slot is free (FIFO): the slot, the agent's
/// circuit breaker and the retry budget in one round trip.
using permit_atom = caf::atom_constant<caf::atom("permit")>;
/// Supervisor -> registry: `(release, task_id)` frees the task's slot or
/// leaves the queue. Supervisor -> its kept worker: `(release)`, the worker
/// is not needed any more (its task waits out a long backoff); it ends.
using release_atom = caf::atom_constant<caf::atom("release")>;
/// Supervisor -> registry: `(agent_result, agent_id, success)` feeds the
/// agent's circuit breaker (fatal failures are not reported).
using agent_result_atom = caf::atom_constant<caf::atom("agentres")>;
/// Supervisor -> itself: `(deadline)` when the task's `deadline_s` is up.
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
/// Internal timer messages of the scripted runtime's actor timer.
using fire_atom = caf::atom_constant<caf::atom("fire")>;
/// A container worker's own idle check (generation-tagged, never remote).
using idle_check_atom = caf::atom_constant<caf::atom("idlecheck")>;
/// Supervisor -> registry after a node restart: `(reclaim, task_id)`, the
/// task's attempt (being adopted) holds a slot again.
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
/// Supervisor -> registry after a node restart: `(resumed, task_id)`, the
/// task has asked again for what it waited for (the registry then grants
/// queued slots in submission order).
using resumed_atom = caf::atom_constant<caf::atom("resumed")>;

// Registry and supervisors -> the journal (node-local, never remote; see
// journal_actor.hpp).
/// `(jtask, id, bytes, at, replace)` -> the task's journal number.
using jtask_atom = caf::atom_constant<caf::atom("jtask")>;
/// `(jinput, number, n, bytes, durable)` -> true once committed (and, if
/// `durable`, synced to disk).
using jinput_atom = caf::atom_constant<caf::atom("jinput")>;
/// `(jrecord, number, n, bytes)`: an input nobody waits for, committed
/// with the next write someone waits for, or soon after (the same for
/// jevent, jend and jstate).
using jrecord_atom = caf::atom_constant<caf::atom("jrecord")>;
/// `(jevent, number, n, event)`: the journal renders its JSON.
using jevent_atom = caf::atom_constant<caf::atom("jevent")>;
/// `(jend, number, at, bytes)`.
using jend_atom = caf::atom_constant<caf::atom("jend")>;
/// `(jforget, task_id)`: drop a forgotten task's record.
using jforget_atom = caf::atom_constant<caf::atom("jforget")>;
/// `(jstate, key, bytes)`; `(jstate, key, bytes, true)` -> true once the
/// write is committed and synced (someone outside is told of it).
using jstate_atom = caf::atom_constant<caf::atom("jstate")>;
/// `(jhistory, number, task_id)` -> vector<event>.
using jhistory_atom = caf::atom_constant<caf::atom("jhistory")>;
/// The journal to itself: commit what arrived.
using jflush_atom = caf::atom_constant<caf::atom("jflush")>;
/// The journal to itself: prune finished tasks.
using jprune_atom = caf::atom_constant<caf::atom("jprune")>;
/// `(health)` -> node_health: breakers, retry budget and slots, for
/// metrics and the dashboard.
using health_atom = caf::atom_constant<caf::atom("health")>;
/// `(agents, window_s)` -> JSON text: per-agent statistics over the last
/// `window_s` seconds (0: everything kept) and a suggested fallback order.
using agents_atom = caf::atom_constant<caf::atom("agents")>;
/// `(metrics)` -> the node's figures as Prometheus text.
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
/// `(view)` -> JSON text: every task with its times (dashboard list);
/// `(view, task_id)` -> JSON text: one task with its events.
using view_atom = caf::atom_constant<caf::atom("view")>;
/// To the statistics actor: `(clock)` -> every task's times as
/// `task_clocks`; `(clock, task_id)` -> one task's (local to the node).
using clock_atom = caf::atom_constant<caf::atom("clock")>;

// -- cluster

/// Worker node -> coordinator's door: `(join, node_offer, agent)` -> the
/// coordinator's name, or an error (a node of that name is joined, the
/// offer is out of bounds).
using join_atom = caf::atom_constant<caf::atom("join")>;

/// Supervisor -> a node's agent: `(run_attempt, remote_attempt, supervisor)`
/// -> the attempt's container worker on that node.
using run_attempt_atom = caf::atom_constant<caf::atom("runattempt")>;

/// Supervisor -> registry: `(node_lost, node)`: the supervisor's attempt on
/// `node` was lost with its connection; place nothing there any more.
using node_lost_atom = caf::atom_constant<caf::atom("nodelost")>;

/// `(nodes)` -> the coordinator's worker nodes, for `tasksup nodes` and
/// `status`.
using nodes_atom = caf::atom_constant<caf::atom("nodes")>;

/// Node membership -> registry: `(node_joined, offer, agent)`: a worker
/// node joined; its slots take attempts from now on.
using node_joined_atom = caf::atom_constant<caf::atom("nodejoined")>;

/// Node membership -> registry: `(node_left, name, why)`: a worker node is
/// gone (its connection failed, or it joined again); nothing is placed
/// there. Node membership -> a dropped node's agent, and that agent -> its
/// node process: `(node_left, why)`: the coordinator dropped the node
/// although its connection holds (an attempt it did not start in time);
/// its attempts end and it joins again.
using node_left_atom = caf::atom_constant<caf::atom("nodeleft")>;

/// Adoption of an attempt that outlived its coordinator (a failover or a
/// restart). Supervisor -> registry: `(adopt, task, node, attempt, owner)`
/// -> the attempt's container worker on `node`, once that node joined
/// again; the registry hands it to the node's agent as `(adopt, task,
/// attempt, epoch, owner)`, and the agent to the container worker as
/// `(adopt, owner)`. The new owner then tells the worker to go on with
/// `(resume)`.
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;

/// Registry -> a worker node's agent: `(adopt_end)`: every attempt this
/// coordinator adopts has been claimed; what the node kept for a lost
/// coordinator and nobody claimed is stopped. The registry to itself:
/// `(adopt_end, task)`: the wait for that task's worker node is over.
using adopt_end_atom = caf::atom_constant<caf::atom("adoptend")>;

// -- container workers

/// Supervisor -> its kept worker: `(next_attempt, attempt_options)`.
using next_attempt_atom = caf::atom_constant<caf::atom("nextatt")>;

// -- the node door

/// Subscriber -> node door: `(ack, received)`: the sender has handled the
/// first `received` events the door sent it since it subscribed. Sent as a
/// request, it is answered with a bool, false when the sender is not (or
/// no longer) subscribed, and doubles as a sign of life of the node; a
/// plain send gets no answer.
using ack_atom = caf::atom_constant<caf::atom("ack")>;

/// Node door -> subscriber: `(dropped, reason)`: the door sends this
/// subscriber no more events (it did not keep up); the reason starts with
/// "dropped: did not keep up".
using dropped_atom = caf::atom_constant<caf::atom("dropped")>;

/// Node-local front end -> node door: `(as_client, who, control_request)`:
/// a control request (stop, kill, retry-now, ...: protocol.hpp) made on
/// behalf of `who`, which the audit line names (e.g. the local control
/// socket's peer uid); answered with whether it took effect. Refused from
/// another node.
using as_client_atom = caf::atom_constant<caf::atom("asclient")>;

/// Client -> node: `(schedule, schedule_request)`: lists, adds, pauses,
/// resumes or deletes schedules (schedule_actor.hpp), answered with the
/// schedules concerned.
using schedule_atom = caf::atom_constant<caf::atom("schedule")>;

} // namespace tasksup

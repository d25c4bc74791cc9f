#pragma once

// A group's carrier: the group machine (group_machine.hpp) on the actor
// clock. Its task members run on a host (the registry, an embedding
// application, a test); its nested groups are group supervisors of their
// own, whose ends it learns as a parent does.

#include "tasksup/actors/atoms.hpp"
#include "tasksup/actors/interfaces.hpp"
#include "tasksup/actors/journal_actor.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/group_spec.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tasksup {

/// Group -> host: run a task member (its first run, or a restart).
using member_start_atom = caf::atom_constant<caf::atom("gmstart")>;
/// Group -> host: stop a task member.
using member_stop_atom = caf::atom_constant<caf::atom("gmstop")>;
/// Host -> group: a task member's run ended.
using member_ended_atom = caf::atom_constant<caf::atom("gmended")>;
/// Group -> parent: every member has started once.
using group_started_atom = caf::atom_constant<caf::atom("gstarted")>;
/// Group -> parent: the group ended.
using group_ended_atom = caf::atom_constant<caf::atom("gended")>;

/// How a group ended, as its parent learns it.
struct group_report {
  std::string group_id;
  /// How the end counts for the parent (`group_machine::end_as_member`).
  member_end as_member = member_end::failed;
  group_end reason = group_end::completed;
  /// The member whose end ended the group, if one did.
  std::string by_member;
  /// Restart decisions the group made.
  std::uint64_t restarts = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_report& x) {
  return f(caf::meta::type_name("group_report"), x.group_id, x.as_member,
           x.reason, x.by_member, x.restarts);
}

/// Runs a group's task members.
/// - `(member_start, group id, task, run)`: runs `task` (its first run, or
///   a restart of a member that ended), answering true once it runs or
///   false (or an error) when it cannot. Its end is sent to the requesting
///   group as `(member_ended, task id, how)`. `run` names this run of the
///   member (positive, never reused for the member): a host that journals
///   its tasks answers a start of a run it has seen as that run went (true,
///   then its end if it ended), which is how a group resumed after a
///   restart of the node finds its members again. Other hosts may ignore
///   it.
/// - `(member_stop, task id, grace_s)`: stops the member (cancel, then kill
///   after `grace_s`); its end comes as `member_ended` like any other.
using group_host_actor =
  caf::typed_actor<caf::replies_to<member_start_atom, std::string, task_spec,
                                   std::int64_t>::with<bool>,
                   caf::reacts_to<member_stop_atom, std::string, double>>;

/// Learns that a group has started every member once (`group_started`,
/// with its id; as OTP's supervisor returns from its start then) and, once,
/// how it ended: the group above it, the registry, or an embedding
/// application's actor. A group whose start fails reports only its end.
using group_parent_actor =
  caf::typed_actor<caf::reacts_to<group_started_atom, std::string>,
                   caf::reacts_to<group_ended_atom, group_report>>;

/// A running group: the ends of its task members (from its host), the
/// starts and ends of its nested groups, and `(stop, mode)`: every member
/// in reverse order, each within its own stop grace (`cancel`) or at once
/// (`kill`, nested groups included), then the group ends `stopped`. A
/// nested group counts as started once it has started all of its own
/// members.
/// - `(stop, group id, mode)`: stops this group or the nested group of that
///   id below it (which then counts as stopped for its own group: it is
///   not restarted) -> whether such a group was running.
/// - `(status)`: the tree below it, this group first (`group_row`, depth
///   0), each nested group's members below that group's row.
using group_supervisor_actor = caf::typed_actor<
  caf::reacts_to<member_ended_atom, std::string, member_end>,
  caf::reacts_to<group_started_atom, std::string>,
  caf::reacts_to<group_ended_atom, group_report>,
  caf::reacts_to<stop_atom, stop_mode>,
  caf::replies_to<stop_atom, std::string, stop_mode>::with<bool>,
  caf::replies_to<status_atom>::with<std::vector<group_row>>>;

/// One group of a tree, as the tree's groups share it.
struct group_slot {
  /// The group's journal row (0: not journaled).
  std::int64_t seq = 0;
  /// The inputs its machine was fed so far, over all of its runs: the
  /// number of its last journal record, and the low half of its run tokens.
  std::atomic<std::int64_t> inputs{0};
  /// Its inputs from the journal after a restart of the node, replayed by
  /// its first supervisor (which takes them).
  std::vector<journaled_group_input> replay;
};

/// What the groups of one tree share: their journal rows and run counters.
/// Filled before the top group starts; afterwards each slot is used by its
/// group's supervisor of the moment only.
struct group_tree {
  /// Where the groups journal their machines' inputs (null: nowhere).
  journal_actor journal;
  /// The high half of the tree's run tokens (from the top group's seed),
  /// so that tokens differ between trees.
  std::int64_t salt = 0;
  /// Each group of the tree, by id.
  std::map<std::string, std::unique_ptr<group_slot>> groups;
};

/// The shared state of `top`'s tree, without a journal: a slot per group,
/// the salt from `seed`.
std::shared_ptr<group_tree> make_group_tree(const group_spec& top,
                                            std::uint64_t seed);

/// What a group supervisor needs.
struct group_options {
  /// The group (shared with the nested groups' supervisors, which take
  /// their part of it).
  std::shared_ptr<const group_spec> spec;
  group_host_actor host;
  /// Told once, when the group ends; may be null.
  group_parent_actor parent;
  /// Takes the group's events (`group_event`, under the group's id): its
  /// start, each member's start and end, each restart decision with its
  /// cause, and its end. Nested groups send theirs here too. May be null.
  event_sink_actor events;
  /// The trace id of the tree's events (every group of a tree shares it).
  std::string trace_id;
  /// Seeds the group's span id and its nested groups' seeds.
  std::uint64_t seed = 0;
  /// What the tree's groups share; made from `spec` and `seed` when null
  /// (a top group of an embedding application).
  std::shared_ptr<group_tree> tree;
  /// A nested group: its parent's token for this run of it (0 for a top
  /// group). A replay whose last start has another token belongs to an
  /// earlier run: the group starts afresh.
  std::int64_t run = 0;
};

/// Spawns the supervisor of `opts.spec` and starts its members in order,
/// or, when its slot holds inputs to replay, resumes the group where they
/// leave it: members that were running are found again through the host
/// (their run tokens), nested groups resume likewise, and an op under way
/// is carried out again.
/// It reports its end to `opts.parent` and then exits. A member's task is
/// started through `opts.host`; a nested group gets a supervisor of its own
/// (linked to this one, so neither outlives the other unnoticed).
group_supervisor_actor spawn_group(caf::actor_system& sys, group_options opts);

} // namespace tasksup

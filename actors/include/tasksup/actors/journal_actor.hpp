#pragma once

// The node's journal as an actor: it owns the SQLite store, runs on its own
// thread (a commit may wait for the disk), and commits whatever arrived
// together (group commit). A request is answered once what it wrote is
// committed (safe against a crash of the node); a submission, and an input
// marked durable, once it is also synced to disk (safe against a crash of
// the machine; one sync, on a thread of its own, for everything committed
// so far). Writes nobody waits for (events, a task's end, node state,
// inputs sent with jrecord) are committed with the next write someone
// waits for, or within 20 ms (node state written with `durable` is
// answered once synced, like a submission). A commit that fails
// for lack of space is retried every second; the writes of accepted tasks are
// kept meanwhile (their supervisors wait), new submissions are refused with the
// reason.

#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/journal/journal_store.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <functional>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup {

/// A task as the journal gave it back when the node started.
struct journal_entry {
  /// The task's number in the journal (submission order).
  std::int64_t seq = 0;
  journaled_task task;
  /// Its machine inputs, in order (empty for a finished task: its status
  /// says everything).
  std::vector<journaled_input> inputs;
  /// Present for a finished task.
  std::optional<task_status> finished;
  /// When it finished (wall-clock seconds); 0 while unfinished.
  double finished_at = 0;
  /// The number of its last journaled event.
  std::int64_t last_event = 0;
  double submitted_at = 0;
};

/// A group of a tree as the journal gave it back when the node started.
struct journal_group_entry {
  /// Its row's number in the journal.
  std::int64_t seq = 0;
  std::string id;
  journaled_group group;
  /// Its machine's inputs, in order (record 1 first), across its runs.
  std::vector<journaled_group_input> inputs;
  /// Present once its tree ended, with when (wall-clock seconds).
  std::optional<journaled_group_end> finished;
  double finished_at = 0;
  /// The number of its last journaled event.
  std::int64_t last_event = 0;
};

/// Everything a restarted node rebuilds from.
struct journal_snapshot {
  std::vector<journal_entry> tasks;
  /// The groups of the trees, in submission order.
  std::vector<journal_group_entry> groups;
  /// Node state by key (breakers, retry budget, rotation).
  std::map<std::string, std::string> node_state;
  /// What the node should tell about records it could read only in part
  /// (a number clamped), each naming its task and record.
  std::vector<std::string> warnings;
};

/// Reads the whole journal; a record it cannot read is an error naming the
/// task and record (the node refuses to start rather than lose it).
expected<journal_snapshot> load_journal(journal::journal_store& store);

/// How the journal keeps finished tasks.
struct journal_retention {
  /// Finished tasks older than this are pruned (0: kept regardless of age).
  double max_age_s = 7 * 24 * 3600.0;
  /// At most this many finished tasks are kept (0: no limit).
  std::int64_t max_count = 10000;
  /// How often pruning runs.
  double interval_s = 300;
};

/// The journal to its syncer (and to itself after a failed sync): put the
/// log on disk.
using jsync_atom = caf::atom_constant<caf::atom("jsync")>;
/// The journal to itself: commit the writes nobody waits for.
using jlater_atom = caf::atom_constant<caf::atom("jlater")>;

/// The journal's interface (protocol.hpp describes each message); anything
/// else sent to it is a compile error. Node-local: it never crosses the
/// network. The last four are what it sends itself.
using journal_actor = caf::typed_actor<
  caf::replies_to<jtask_atom, std::string, std::string, double,
                  bool>::with<std::int64_t>,
  caf::replies_to<jinput_atom, std::int64_t, std::int64_t, std::string,
                  bool>::with<bool>,
  caf::reacts_to<jrecord_atom, std::int64_t, std::int64_t, std::string>,
  caf::reacts_to<jevent_atom, std::int64_t, std::int64_t, event>,
  caf::reacts_to<jend_atom, std::int64_t, double, std::string>,
  caf::reacts_to<jforget_atom, std::string>,
  caf::reacts_to<jstate_atom, std::string, std::string>,
  caf::replies_to<jstate_atom, std::string, std::string, bool>::with<bool>,
  caf::replies_to<jhistory_atom, std::int64_t,
                  std::string>::with<std::vector<event>>,
  caf::replies_to<jstats_atom>::with<journal_figures>,
  caf::reacts_to<jflush_atom>, caf::reacts_to<jlater_atom>,
  caf::reacts_to<jsync_atom>, caf::reacts_to<jprune_atom>>;

/// Called (on the journal's thread) when a commit failed because another
/// coordinator leads the shared journal now (journal_store::deposed), with
/// why. The journal then stops with an error: nothing more of this node can
/// be journaled, so the node must stop too.
using journal_deposed_hook = std::function<void(const std::string&)>;

/// Spawns the journal on its own thread.
journal_actor spawn_journal(caf::actor_system& sys,
                            std::unique_ptr<journal::journal_store> store,
                            journal_retention retention = {},
                            journal_deposed_hook on_deposed = {});

} // namespace tasksup

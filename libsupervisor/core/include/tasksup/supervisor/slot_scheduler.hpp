#pragma once

// Attempt slots and where they are: the slots of this node, the worker nodes
// that joined and their load, and the FIFO of tasks waiting for a slot.
// Pure: no clock, no actors. The registry asks it and delivers what it
// decides (docs/ARCHITECTURE.md, "Where each decision lives").

#include "tasksup/supervisor/placement.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup {

/// A task asking for an attempt slot.
struct slot_request {
  std::string task_id;
  /// What its attempts need from a worker node (runtime, labels).
  placement_request placement;
  /// Its attempts run on this node whatever nodes joined (a repository
  /// task: its worktrees, gates and delivery are here).
  bool local_only = false;
};

/// A slot given to a waiting task.
struct slot_grant {
  std::string task_id;
  /// The worker node the slot is on, empty for this node.
  std::string node;
};

/// Decides who holds the attempt slots. A coordinator without worker nodes
/// runs attempts itself, up to `local_limit` at once, except those of tasks
/// that ask for labels (it has none: they wait for a worker that carries
/// them); once workers joined, only local-only tasks run here and the rest
/// go to the fitting worker with the most free slots (`choose_node`). Waiting
/// tasks are served in order, but a task that fits nowhere now does not hold up
/// the ones behind it that fit elsewhere.
class slot_scheduler {
public:
  /// `local_limit` is clamped to at least 1.
  explicit slot_scheduler(int local_limit = 1);

  /// Asks for a slot. Granted at once when the queue is not held and a slot
  /// fits (whoever waits fits nowhere now, or would have been served): the
  /// answer names the node ("" for this one).
  /// Otherwise `req` joins the queue and nullopt is returned; its grant
  /// comes from a later call. A task that already holds or waits for a slot
  /// keeps what it has (the answer is its node, or nullopt while queued).
  std::optional<std::string> request(slot_request req);

  /// Gives back `task_id`'s slot, or takes it out of the queue; unknown ids
  /// change nothing. Answers the grants the freed slot allows.
  std::vector<slot_grant> release(const std::string& task_id);

  /// `task_id` holds a slot without asking: a task rebuilt after a restart
  /// that adopted its running attempt, here or on worker node `node`. A
  /// node that has not joined (again) yet counts it once it does.
  void reclaim(const std::string& task_id, const std::string& node = {});

  /// Grants nothing until `resume`: tasks rebuilt after a restart ask again
  /// in whatever order their supervisors start, and must not overtake each
  /// other.
  void hold();

  /// Ends `hold`: the queue is put in `order` (smaller first; ties keep
  /// their place) and served.
  std::vector<slot_grant>
  resume(const std::function<std::int64_t(const std::string&)>& order);

  /// Whether `hold` is in effect.
  bool held() const noexcept { return held_; }

  /// Places only local-only tasks on this node until a worker node joins or
  /// `stop_awaiting_nodes`: a coordinator restarted while worker nodes ran
  /// its attempts waits for them to join again.
  void await_nodes() { awaiting_nodes_ = true; }

  /// Ends `await_nodes` (the wait is over): answers the grants this allows.
  std::vector<slot_grant> stop_awaiting_nodes();

  /// Whether `await_nodes` is in effect.
  bool awaiting_nodes() const noexcept { return awaiting_nodes_; }

  /// A worker node joins with its capacity (its name is new: the caller
  /// checks the offer and replaces a node that joins again with
  /// `remove_node` first). The slots tasks reclaimed there count as running
  /// on it. Answers the grants its capacity allows.
  std::vector<slot_grant> add_node(node_offer offer);

  /// Forgets worker node `name`: nothing is placed there any more (its
  /// holders keep their slot until they release it, which then frees
  /// nothing). Answers the grants this allows (the last node gone, the
  /// queue runs here again). Unknown names change nothing.
  std::vector<slot_grant> remove_node(const std::string& name);

  /// Whether worker node `name` joined.
  bool has_node(const std::string& name) const {
    return nodes_.count(name) > 0;
  }

  /// The attempts holding a slot on worker node `name` (0 when unknown).
  int running_on(const std::string& name) const;

  /// The worker nodes, in name order, with their load.
  std::vector<std::pair<std::string, node_load>> nodes() const;

  /// Whether `task_id` holds a slot.
  bool holds(const std::string& task_id) const {
    return holders_.count(task_id) > 0;
  }

  /// Where `task_id`'s slot is ("" for this node); nullopt when it holds
  /// none.
  std::optional<std::string> node_of(const std::string& task_id) const;

  /// Why `task_id` waits, in a sentence for `status`; nullopt when it is
  /// not in the queue.
  std::optional<std::string> waiting_reason(const std::string& task_id) const;

  /// Slots held, on this node and on workers.
  std::size_t in_use() const noexcept { return holders_.size(); }

  /// Tasks waiting for a slot.
  std::size_t queued() const noexcept { return queue_.size(); }

  /// The slots attempts may hold: this node's limit without worker nodes,
  /// the workers' combined limit with some.
  int capacity() const;

private:
  std::size_t local_in_use() const;
  /// The worker nodes as placement sees them, in name order.
  std::vector<node_load> loads() const;
  std::optional<std::string> place(const slot_request& req) const;
  bool any_free() const;
  void take(const std::string& task_id, const std::string& node);
  std::vector<slot_grant> serve();

  std::size_t local_limit_;
  bool held_ = false;
  bool awaiting_nodes_ = false;
  struct holder {
    /// Where the slot is ("" for this node).
    std::string node;
    /// Its node left: releasing it frees nothing there (a node that joins
    /// again under the name starts from its own count).
    bool orphaned = false;
    /// Reclaimed on a node that has not joined (again) yet: counted there
    /// once it does.
    bool unjoined = false;

    bool counted() const noexcept { return !orphaned && !unjoined; }
  };
  std::map<std::string, holder> holders_;
  std::map<std::string, node_load> nodes_;
  /// The waiting tasks in order: a list, so that a task leaves from the
  /// middle and the queue is sorted without moving the others.
  std::list<slot_request> queue_;
  /// Each waiting task's place in `queue_`: whether a task waits, and why,
  /// is a lookup, not a walk of a queue that may hold every task of the
  /// node.
  std::map<std::string, std::list<slot_request>::iterator> queued_ids_;
};

} // namespace tasksup

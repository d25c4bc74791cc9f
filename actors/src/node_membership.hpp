#pragma once

// Internal to tasksup::actors: the registry's node membership, the child
// that knows which worker nodes have joined (docs/ARCHITECTURE.md, "The
// registry").

#include "tasksup/actors/atoms.hpp"
#include "tasksup/actors/interfaces.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/local_actor.hpp>
#include <caf/node_id.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <string>

namespace tasksup::detail {

/// What the membership tells the registry: a node joined (its offer and
/// agent), or left (its name, and why). Both come in the order they
/// happened, so the registry's placement names only nodes the membership
/// holds or has just dropped.
using membership_listener_actor = caf::typed_actor<
  caf::reacts_to<node_joined_atom, node_offer, node_agent_actor>,
  caf::reacts_to<node_left_atom, std::string, std::string>>;

/// Why a node a supervisor reported is lost (the registry's log and the
/// node's own).
inline constexpr const char* lost_with_connection =
  "an attempt there was lost with its connection";

/// How long a joined node's agent has to answer when another node claims
/// its name: if it does not, the new node takes the name (a worker
/// restarted while its old connection still looked open); if it does, the
/// new node is refused as a duplicate.
inline constexpr std::chrono::seconds join_probe_timeout{2};

/// The worker nodes that joined: a join is checked (offer bounds, one node
/// per name, at most `max_nodes`), the node's agent monitored, and a node
/// is lost when its agent goes down, when another node takes its name (see
/// `join_probe_timeout`), or when one of the registry's supervisors lost
/// an attempt with the node's connection (`node_lost`, sent on by the
/// registry, which checked who sent it; `node_id` tells a node that joined
/// again since from the one that was lost).
using node_membership_actor = caf::typed_actor<
  caf::replies_to<join_atom, node_offer, node_agent_actor>::with<std::string>,
  caf::reacts_to<node_lost_atom, std::string, caf::node_id>>;

/// Spawns the membership of the coordinator called `coordinator`, linked
/// to `registry` (its `listener`); a node whose lease is not below
/// `peer_timeout_s` (when both are stated) is refused.
node_membership_actor spawn_node_membership(caf::local_actor* registry,
                                            membership_listener_actor listener,
                                            std::string coordinator,
                                            double peer_timeout_s);

} // namespace tasksup::detail

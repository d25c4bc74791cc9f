#pragma once

// The public face of a node: the only actor `tasksup serve` publishes. It
// speaks the client protocol and nothing else, and forwards each request to
// the registry as its own request, so no reply, event or error a client
// receives carries the address of an internal actor.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace tasksup {

/// Spawns the door of the node whose registry is `registry`. It accepts
/// `(submit, task_spec)`, `(submit_json, text)` (text at most
/// `wire::max_task_json_bytes`), `(stop, task_id, stop_mode)`,
/// `(retry_now, task_id)`, `(force_fb, task_id)`, `(status)`,
/// `(status, task_id)`, `(await, task_id)`, `(subscribe, actor)` and
/// `(unsubscribe, actor)`, with the registry's answers. Internal messages
/// (slot, release, breaker and budget reports, escalations, events) are
/// refused: a request gets `sec::unexpected_message`, anything else is
/// dropped. It streams the registry's events to at most
/// `wire::max_subscribers` subscribers itself, as `(event, event)` sent by
/// the door. It ends when the registry ends.
caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry);

/// As above, and `(agents, window_s)` and `(view)` answered by the node's
/// statistics actor `stats` (see stats_actor.hpp); without one these
/// queries are refused.
caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry,
                           caf::actor stats);

} // namespace tasksup

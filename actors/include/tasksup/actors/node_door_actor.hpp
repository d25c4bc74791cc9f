#pragma once

// The public face of a node: the only actor `tasksup serve` publishes. It
// speaks the client protocol and nothing else, and forwards each request to
// the registry as its own request, so no reply, event or error a client
// receives carries the address of an internal actor.

#include "tasksup/actors/stats_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/message.hpp>
#include <caf/node_id.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace tasksup {

/// Back-pressure on event subscribers. The door keeps, per subscriber, the
/// events it sent and the subscriber has not acknowledged yet (their count
/// and their cost, see below), and drops the subscriber (with a final
/// `(dropped, reason)`) when
/// - it has acknowledged nothing for `door_stall_timeout` while events
///   wait for it, or
/// - its unacknowledged events pass `door_max_unacked_events` or
///   `door_max_unacked_bytes`, or
/// - the unacknowledged events of all subscribers together pass
///   `door_max_unacked_total_bytes` and it is the one furthest behind.
/// A subscriber that keeps acknowledging is dropped only by the caps: a
/// burst of more events than the caps within the time the subscriber takes
/// to read them.
inline constexpr std::chrono::seconds door_stall_timeout{10};
inline constexpr std::size_t door_max_unacked_events = 65536;
inline constexpr std::size_t door_max_unacked_bytes = 64u << 20;
inline constexpr std::size_t door_max_unacked_total_bytes = 256u << 20;

/// What an unacknowledged event is counted as: its JSON text, its task id
/// and this much for the message around it.
inline constexpr std::size_t door_event_overhead_bytes = 128;

/// A node's door: the client protocol (node_client_actor), each request
/// forwarded to the registry as the door's own; requests the node's own
/// front ends make on a client's behalf (`as_client`); the statistics
/// actor's views; and the node's events streamed to subscribers, who
/// acknowledge them with `(ack, received)`.
using node_door_actor = node_client_actor::extend<
  caf::replies_to<as_client_atom, std::string, control_request>::with<bool>,
  caf::replies_to<view_atom>::with<std::string>,
  caf::replies_to<agents_atom, double>::with<std::string>,
  caf::replies_to<ack_atom, std::uint64_t>::with<bool>,
  caf::reacts_to<event_atom, event>>;

/// Spawns the door of the node whose registry is `registry`. It accepts
/// `(submit, task_spec)`, `(submit_json, text)` (text at most
/// `wire::max_task_json_bytes`), `(stop, task_id, stop_mode)`,
/// `(retry_now, task_id)`, `(force_fb, task_id)`, `(status)`,
/// `(status, task_id)`, `(await, task_id)`, `(subscribe, actor)` and
/// `(unsubscribe, subscriber)`, with the registry's answers. Internal messages
/// (slot, release, breaker and budget reports, escalations, events) are
/// refused: a request gets `sec::unexpected_message`, anything else is
/// dropped. It streams the registry's events to at most
/// `wire::max_subscribers` subscribers itself, as `(event, event)` sent by
/// the door, which each subscriber acknowledges with `(ack, received)`
/// (back-pressure above). It ends when the registry ends.
node_door_actor spawn_node_door(caf::actor_system& sys,
                                registry_actor registry);

/// As above, and `(agents, window_s)` and `(view)` answered by the node's
/// statistics actor `stats` (see stats_actor.hpp); without one these
/// queries are refused.
node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats);

/// A line for the node's log, called from the door's thread.
using door_log_fn = std::function<void(const std::string&)>;

/// As above, and `log` is told each time a subscriber is dropped (which
/// one and why).
node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats, door_log_fn log);

/// What the certificate a remote client showed in the TLS handshake says.
struct peer_certificate {
  /// Its subject (RFC 2253).
  std::string subject;
  /// A node certificate (extended key usage serverAuth, or none stated, as
  /// `tasksup certs init` makes node.crt): it may join as a worker node.
  /// The client.crt it makes says clientAuth only.
  bool node_certificate = false;
};

/// Who a remote client is, by the node its requests come from; nullopt
/// when unknown.
using door_peer_fn =
  std::function<std::optional<peer_certificate>(const caf::node_id&)>;

/// How much a client may leave pending at the door, and for how long, with
/// the door's logs. A client is a peer node for remote requests (one
/// connection) and the sending actor for in-process ones. What counts as
/// pending: an `await` not answered yet and an event subscription.
struct door_options {
  /// Pending awaits and subscriptions of one client at most; one more is
  /// refused with `protocol_error::limit_reached`.
  std::size_t max_pending_per_client = 10000;
  /// Pending awaits and subscriptions of all clients together at most.
  std::size_t max_pending = 100000;
  /// An `await` not answered this long ends with
  /// `protocol_error::await_timeout` (the task is still running; the client
  /// awaits it again to keep waiting).
  caf::timespan await_timeout = std::chrono::minutes{5};
  /// Told each time a subscriber is dropped; may be empty.
  door_log_fn log;
  /// Told of each control request (stop, kill, retry-now, fallback-now):
  /// the audit line naming the client, the action and the task; may be
  /// empty.
  door_log_fn audit;
  /// Names a remote client in audit lines, and says whether it showed a
  /// node certificate; may be empty.
  door_peer_fn peer;
  /// A worker node must show a node certificate to join (`peer` says which
  /// it showed): the node serves TLS. False: anyone who reaches the door
  /// may join (plain TCP, `--insecure`).
  bool joins_need_node_certificate = false;
};

/// As above, with the limits and logs of `opts`. Each control request is
/// also published as a `warning` event of its task ("audit: ..."), so the
/// task's history shows who asked for it.
node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats, door_options opts);

} // namespace tasksup

#pragma once

// The node's side of its local control socket (local_control.hpp has the
// protocol): `status` and `submit` answered from the node's door, as a
// remote client's requests are, so both paths see the same checks and
// answers.

#include "http_request.hpp"
#include "http_server.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/stats_actor.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/message.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tasksup::app {

/// What the routes need.
struct local_api_context {
  caf::actor_system* sys = nullptr;
  /// The node's door (node_door_actor.hpp).
  node_door_actor door;
  /// The node's statistics (stats_actor.hpp), for the times `status`
  /// shows; null: none shown.
  stats_actor stats;
};

/// The limits of the control socket's HTTP server: a submit batch holds up
/// to `local_submit_batch` tasks; one task of the largest size a node
/// accepts, every byte escaped, still fits.
http_server_options local_api_server_options(const std::string& path);

/// The request a control action (control_actions.hpp: stop, kill,
/// retry-now, fallback-now, forget, pause, resume) makes of the node's
/// door; nullopt for any other name.
std::optional<control_request> control_request_for(std::string_view action,
                                                   std::string task_id);

/// Answers one request through `reply` (later, once the door answered; the
/// server's thread never waits).
void handle_local_request(const local_api_context& ctx, const http_request& req,
                          http_reply reply);

} // namespace tasksup::app

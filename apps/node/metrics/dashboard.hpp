#pragma once

// The node's HTTP face: /metrics (Prometheus text), the dashboard page and
// the JSON it polls, and the control buttons' POST endpoints, all answered
// from the node's statistics actor and registry.

#include "http_request.hpp"
#include "http_server.hpp"
#include "webhooks.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/stats_actor.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace tasksup::app {

/// The embedded page, script and style (dashboard_assets.cpp).
extern const std::string_view dashboard_html;
extern const std::string_view dashboard_js;
extern const std::string_view dashboard_css;

/// The header a control POST must carry (any value). A cross-site form or
/// script cannot set it without a CORS preflight, which the server never
/// approves, so a page elsewhere cannot press the buttons for the user.
inline constexpr std::string_view csrf_header = "x-tasksup-csrf";

/// Tasks in one page of `/api/tasks` unless `limit` says otherwise, and the
/// most a page can hold.
inline constexpr std::size_t default_task_page = 100;
inline constexpr std::size_t max_task_page = 1000;

/// What the routes need.
struct dashboard_context {
  caf::actor_system* sys = nullptr;
  registry_actor registry;
  stats_actor stats;
  /// The node's door (node_door_actor.hpp): control requests go through
  /// it, so they are audited like a client's.
  node_door_actor door;
  /// Accept any Host header (the server listens beyond loopback); else only
  /// loopback names, against DNS rebinding.
  bool allow_remote = false;
  /// The secret every request must show (dashboard_auth.hpp).
  std::string token;
  /// Where it is kept, for the 401 text.
  std::string token_path;
  /// The HTTP server's own figures, added to /metrics (null: none); called
  /// on the server's thread.
  std::function<http_server_stats()> server_stats;
  /// The webhook endpoints (`/hooks/...`), which deliveries' signatures
  /// authenticate instead of the token.
  webhook_context hooks;
};

/// The HTTP server's figures as Prometheus text (`tasksup_http_...`).
std::string http_server_metrics(const http_server_stats& s);

/// Answers one request, through `reply` (now, or later once the node's
/// actors answered; the server's thread never waits):
///   GET  /metrics                      Prometheus text
///   GET  /, /dashboard.js, /dashboard.css
///   GET  /api/tasks?limit=N&after=ID   one page of tasks, newest first
///   GET  /api/tasks/ID                 one task with its events
///   GET  /api/agents?window=SECONDS    per-agent statistics
///   GET  /api/schedules                the node's schedules, next runs
///   POST /hooks/github, /hooks/NAME    webhook deliveries (webhooks.hpp),
///                                      signed instead of the token
///   GET  /api/stream                   server-sent events: which tasks
///                                      changed, at most 4 times a second
///   POST /api/tasks/ID/{stop,kill,retry-now,fallback-now,pause,resume}
/// Every request must carry the token (`Authorization: Bearer`, or the
/// cookie `GET /?token=TOKEN` sets), else 401. HEAD works wherever GET does;
/// other methods get 405 with Allow.
void handle_node_request(const dashboard_context& ctx, const http_request& req,
                         http_reply reply);

} // namespace tasksup::app

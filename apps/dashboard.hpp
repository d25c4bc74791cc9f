#pragma once

// The node's HTTP face: /metrics (Prometheus text), the dashboard page and
// the JSON it polls, and the control buttons' POST endpoints, all answered
// from the node's statistics actor and registry.

#include "http_request.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
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

/// What the routes need.
struct dashboard_context {
  caf::actor_system* sys = nullptr;
  caf::actor registry;
  caf::actor stats;
  /// Accept any Host header (the server listens beyond loopback); else only
  /// loopback names, against DNS rebinding.
  bool allow_remote = false;
};

/// Answers one request:
///   GET  /metrics                      Prometheus text
///   GET  /, /dashboard.js, /dashboard.css
///   GET  /api/tasks                    every task with its times
///   GET  /api/tasks/ID                 one task with its events
///   GET  /api/agents?window=SECONDS    per-agent statistics
///   POST /api/tasks/ID/{stop,kill,retry-now,fallback-now}
/// HEAD works wherever GET does; other methods get 405 with Allow.
http_response handle_node_request(const dashboard_context& ctx,
                                  const http_request& req);

} // namespace tasksup::app

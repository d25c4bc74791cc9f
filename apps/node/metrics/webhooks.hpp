#pragma once

// The node's webhook endpoints (docs/BEHAVIOUR.md, "Webhooks"), on the
// same HTTP server as the dashboard but authenticated by each delivery's
// signature rather than the dashboard's token:
//   POST /hooks/github   a GitHub delivery, for every `github` trigger whose
//                        secret signed it
//   POST /hooks/NAME     a delivery for the `generic` trigger NAME
// A delivery a trigger starts a task for is submitted (journaled before
// the answer); one that closes an issue stops its task.

#include "http_request.hpp"
#include "http_server.hpp"
#include "webhook_ledger.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/supervisor/trigger.hpp"

#include <caf/actor_system.hpp>

#include <functional>
#include <memory>
#include <string>

namespace tasksup::app {

/// What the endpoints need of the node.
struct webhook_context {
  caf::actor_system* sys = nullptr;
  /// Tasks are submitted and stopped through the door (audited).
  node_door_actor door;
  /// The config directory's triggers, with their secrets.
  std::shared_ptr<const trigger_map> triggers;
  /// Where a line about each delivery goes (the node's log).
  std::function<void(const std::string&)> log;
  /// The deliveries handled and the reports waiting (null: none kept, so
  /// only a task's id tells a replay).
  std::shared_ptr<webhook_ledger> ledger;
};

/// The header a generic sender puts its signature in.
inline constexpr std::string_view generic_signature_header =
  "x-tasksup-signature-256";

/// The header a generic sender names its delivery in (its task's id is the
/// trigger's name and this).
inline constexpr std::string_view generic_delivery_header =
  "x-tasksup-delivery";

/// Whether `path` is a webhook endpoint's (`/hooks/...`).
bool is_webhook_path(const std::string& path);

/// Answers one delivery to `/hooks/...`:
/// - 405 for another method than POST, 404 for an unknown generic trigger;
/// - 401 when no trigger's secret signed the body (nothing else happens);
/// - 400 for a missing event or delivery header, or a body that is not
///   JSON (the server refused an oversized one already, 413);
/// - 200 for GitHub's `ping`;
/// - 200 with `{"delivery", "replayed": true, "handled_at"}` for a
///   delivery the ledger remembers: nothing else happens;
/// - 204 when every trigger ignored it (logged with why; not remembered);
/// - else 200 with `{"delivery", "results": [{"trigger", "action",
///   "task_id", "reason"}]}` once each start was journaled (with its
///   report, when the trigger has one), each stop sent and the delivery
///   journaled in the ledger (a task that existed already, as a delivery
///   about the same issue finds it, is `"action": "exists"`); a start the
///   node refused is `"action": "rejected"` with the node's reason;
/// - 503 when the node could not be asked or the delivery not journaled:
///   the sender delivers it again, and what was done is not done twice.
void handle_webhook(const webhook_context& ctx, const http_request& req,
                    http_reply reply);

} // namespace tasksup::app

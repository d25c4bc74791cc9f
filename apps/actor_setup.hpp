#pragma once

#include <caf/actor_system_config.hpp>

namespace tasksup::app {

/// Prepares the actor system config of a tasksup command: registers the
/// message protocol (so the same types cross the network), picks the
/// scheduler, and with `network` loads CAF's io middleman with heartbeats so
/// that a frozen peer is noticed. Command-line arguments are not passed to
/// CAF: the CLI owns them.
void configure_actor_system(caf::actor_system_config& cfg, bool network);

} // namespace tasksup::app

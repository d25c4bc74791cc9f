#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

namespace tasksup::app {

/// Signal watch thread -> a command's own actor: `(signal, count)`, where
/// count is 1 for the first SIGINT/SIGTERM. Local only, never on the wire.
using signal_atom = caf::atom_constant<caf::atom("signal")>;

/// Prepares the actor system config of a tasksup command: registers the
/// message protocol (so the same types cross the network), picks the
/// scheduler, and with `network` loads CAF's io middleman with heartbeats so
/// that a frozen peer is noticed. Command-line arguments are not passed to
/// CAF: the CLI owns them.
void configure_actor_system(caf::actor_system_config& cfg, bool network);

} // namespace tasksup::app

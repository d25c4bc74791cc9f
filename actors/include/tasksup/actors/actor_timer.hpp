#pragma once

#include "tasksup/runtime/scripted_runtime.hpp"

#include <caf/actor_system.hpp>

namespace tasksup {

/// A timer for the scripted runtime driven by the actor system's clock: under
/// a test coordinator its delays pass in simulated time (`advance_time`), on
/// the real scheduler in real time. Zero delays fire at once. Backed by a
/// hidden actor, so it never delays the system's shutdown.
runtime::scripted_runtime::timer_fn make_actor_timer(caf::actor_system& sys);

} // namespace tasksup

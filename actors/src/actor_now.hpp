#pragma once

// The one way actors read the time the task machine and the node's policy
// objects are given: the actor clock (simulated under the test
// coordinator), in seconds.

#include <caf/local_actor.hpp>

#include <chrono>

namespace tasksup::detail {

/// Seconds on the clock of `self`'s actor system (steady; simulated under
/// the test coordinator), moved once per process onto the wall clock's
/// scale: times a node journals (a retry's due time, restart windows,
/// breakers) still mean the same to the node that resumes them, also after
/// a reboot, while within one process time never jumps.
inline double now_s(caf::local_actor* self) {
  using namespace std::chrono;
  static const double offset =
    duration<double>(system_clock::now().time_since_epoch()).count() -
    duration<double>(steady_clock::now().time_since_epoch()).count();
  return duration<double>(self->clock().now().time_since_epoch()).count() +
         offset;
}

} // namespace tasksup::detail

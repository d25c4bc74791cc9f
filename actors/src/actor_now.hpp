#pragma once

// The one way actors read the time the task machine and the node's policy
// objects are given: the actor clock (simulated under the test
// coordinator), in seconds.

#include <caf/local_actor.hpp>

#include <chrono>

namespace tasksup::detail {

/// Seconds on the clock of `self`'s actor system.
inline double now_s(caf::local_actor* self) {
  using namespace std::chrono;
  return duration<double>(self->clock().now().time_since_epoch()).count();
}

} // namespace tasksup::detail

#pragma once

// The events as the actors make them: the core's builders
// (tasksup/supervisor/events.hpp) and the clock reading that stamps them,
// which the core leaves to its callers.

#include "tasksup/supervisor/events.hpp"

namespace tasksup {

/// Seconds since the Unix epoch, now (for `event_head::ts`).
double wall_clock_s();

} // namespace tasksup

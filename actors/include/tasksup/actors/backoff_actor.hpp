#pragma once

#include "tasksup/actors/protocol.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>

namespace tasksup {

/// The backoff actor's interface: `(delay, delay_request)` ->
/// `delay_decision` (the delay and where it came from), computed from the
/// request's schedule (retry-after hint included). Anything else sent to it
/// is a compile error.
using backoff_actor = caf::typed_actor<
  caf::replies_to<delay_atom, delay_request>::with<delay_decision>>;

/// Spawns a backoff actor drawing jitter from its own mt19937_64 seeded
/// with `seed`.
backoff_actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed);

} // namespace tasksup

#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

namespace tasksup {

/// Spawns a backoff actor: answers `(delay, delay_request)` with a
/// `delay_decision` (the delay and where it came from) computed from the
/// request's schedule (retry-after hint included), drawing jitter from its
/// own mt19937_64 seeded with `seed`.
caf::actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed);

} // namespace tasksup

#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>

namespace tasksup {

/// Spawns a backoff actor: answers `(delay, delay_request)` with the delay in
/// seconds from the request's backoff settings (retry-after hint included),
/// drawing jitter from its own mt19937_64 seeded with `seed`.
caf::actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed);

} // namespace tasksup

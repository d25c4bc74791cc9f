#include "tasksup/actors/backoff_actor.hpp"

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/backoff.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace tasksup {

namespace {

struct backoff_state {
  backoff_rng rng;
  static inline const char* name = "tasksup.backoff";
};

/// Computes delays from the schedule each request names (the task machine
/// chose it): the actor only owns the node's seeded randomness.
backoff_actor::behavior_type
backoff_impl(backoff_actor::stateful_pointer<backoff_state> self,
             std::uint64_t seed) {
  self->state.rng.seed(seed);
  return {
    [=](delay_atom, const delay_request& req) {
      return compute_delay(req.spec, req.retry_index, req.previous_s,
                           self->state.rng, req.hint_s);
    },
  };
}

} // namespace

backoff_actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed) {
  return sys.spawn(backoff_impl, seed);
}

} // namespace tasksup

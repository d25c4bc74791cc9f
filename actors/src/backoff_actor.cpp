#include "tasksup/actors/backoff_actor.hpp"

#include "tasksup/actors/protocol.hpp"

#include "supervisor/backoff.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

namespace tasksup {

namespace {

struct backoff_state {
  backoff_rng rng;
  static inline const char* name = "tasksup.backoff";
};

caf::behavior backoff_actor(caf::stateful_actor<backoff_state>* self,
                            std::uint64_t seed) {
  self->state.rng.seed(seed);
  return {
    [=](delay_atom, const delay_request& req) {
      backoff_policy policy{req.backoff_base_s, req.rate_limit_base_s,
                            req.overrides};
      return policy.delay_s(req.retry_index, req.cls, req.previous_s,
                            self->state.rng, req.hint_s);
    },
  };
}

} // namespace

caf::actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed) {
  return sys.spawn(backoff_actor, seed);
}

} // namespace tasksup

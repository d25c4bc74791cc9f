#include "tasksup/actors/backoff_actor.hpp"

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/backoff.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <optional>

namespace tasksup {

namespace {

struct backoff_state {
  backoff_rng rng;
  /// The policy of the last request without per-class overrides, kept with
  /// its bases: most tasks use the same ones, and building a policy (its
  /// schedule tables) for every retry cost more than computing the delay.
  std::optional<backoff_policy> shared;
  double shared_base_s = 0;
  double shared_rate_limit_base_s = 0;
  static inline const char* name = "tasksup.backoff";

  /// The policy for `req`: the shared one when it has no overrides.
  const backoff_policy& policy_for(const delay_request& req,
                                   std::optional<backoff_policy>& own) {
    if (!req.overrides.empty())
      return own.emplace(req.backoff_base_s, req.rate_limit_base_s,
                         req.overrides);
    if (!shared || shared_base_s != req.backoff_base_s ||
        shared_rate_limit_base_s != req.rate_limit_base_s) {
      shared.emplace(req.backoff_base_s, req.rate_limit_base_s);
      shared_base_s = req.backoff_base_s;
      shared_rate_limit_base_s = req.rate_limit_base_s;
    }
    return *shared;
  }
};

caf::behavior backoff_actor(caf::stateful_actor<backoff_state>* self,
                            std::uint64_t seed) {
  self->state.rng.seed(seed);
  return {
    [=](delay_atom, const delay_request& req) {
      auto& st = self->state;
      std::optional<backoff_policy> own;
      return st.policy_for(req, own).delay_s(
        req.retry_index, req.cls, req.previous_s, st.rng, req.hint_s);
    },
  };
}

} // namespace

caf::actor spawn_backoff(caf::actor_system& sys, std::uint64_t seed) {
  return sys.spawn(backoff_actor, seed);
}

} // namespace tasksup

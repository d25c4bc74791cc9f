#include "tasksup/actors/actor_timer.hpp"

#include "call_table.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/send.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

namespace tasksup {

namespace {

/// The callbacks waiting for their time: the timer function (called on any
/// thread) files a callback and sends its number to the timer actor as a
/// delayed `(fire, number)`; the actor takes the callback out and runs it.
using pending_timers = detail::call_table<void>;

/// The timer actor: `(fire, number)` runs the callback filed under it.
using timer_actor = caf::typed_actor<caf::reacts_to<fire_atom, std::uint64_t>>;

timer_actor::behavior_type
timer_behavior(timer_actor::pointer self,
               std::shared_ptr<pending_timers> pending) {
  // Callbacks may hold what holds this timer: let them go with the actor.
  self->attach_functor([pending] { pending->clear(); });
  return {
    [pending](fire_atom, std::uint64_t id) {
      if (auto fire = pending->take(id))
        fire();
    },
  };
}

} // namespace

runtime::scripted_runtime::timer_fn make_actor_timer(caf::actor_system& sys) {
  auto pending = std::make_shared<pending_timers>();
  auto timer = sys.spawn<caf::hidden>(timer_behavior, pending);
  return [timer, pending](double delay_s, std::function<void()> fire) {
    if (delay_s <= 0) {
      fire();
      return;
    }
    auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(delay_s));
    caf::delayed_anon_send(timer, delay, fire_atom::value,
                           pending->add(std::move(fire)));
  };
}

} // namespace tasksup

#include "tasksup/actors/actor_timer.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <utility>

namespace tasksup::detail {

/// A callback carried by a local timer message; never leaves the process.
struct timer_callback {
  std::shared_ptr<std::function<void()>> fn;
};

} // namespace tasksup::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(tasksup::detail::timer_callback)

namespace tasksup {

runtime::scripted_runtime::timer_fn make_actor_timer(caf::actor_system& sys) {
  auto timer = sys.spawn<caf::hidden>([]() -> caf::behavior {
    return {
      [](fire_atom, const detail::timer_callback& cb) { (*cb.fn)(); },
    };
  });
  return [timer](double delay_s, std::function<void()> fire) {
    if (delay_s <= 0) {
      fire();
      return;
    }
    auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(delay_s));
    caf::delayed_anon_send(
      timer, delay, fire_atom::value,
      detail::timer_callback{
        std::make_shared<std::function<void()>>(std::move(fire))});
  };
}

} // namespace tasksup

#include "tasksup/actors/actor_timer.hpp"

#include "tasksup/actors/protocol.hpp"

#include <caf/send.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tasksup {

namespace {

/// The callbacks waiting for their time, by number. The timer function
/// (called on any thread) files a callback here and sends its number to the
/// timer actor as a delayed `(fire, number)`; the actor takes the callback
/// out and runs it. Only the number travels in the message.
class pending_timers {
public:
  std::uint64_t add(std::function<void()> fire) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto id = ++last_;
    fns_.emplace(id, std::move(fire));
    return id;
  }

  /// The callback filed under `id` (empty if there is none), removed.
  std::function<void()> take(std::uint64_t id) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = fns_.find(id);
    if (i == fns_.end())
      return {};
    auto fire = std::move(i->second);
    fns_.erase(i);
    return fire;
  }

  /// Drops every callback (the timer actor ended: none will run).
  void clear() {
    std::unordered_map<std::uint64_t, std::function<void()>> dropped;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      dropped.swap(fns_);
    }
  }

private:
  std::mutex mtx_;
  std::uint64_t last_ = 0;
  std::unordered_map<std::uint64_t, std::function<void()>> fns_;
};

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

#include "tasksup/actors/node_door_actor.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/wire_limits.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

struct door_state {
  caf::actor registry;
  /// The statistics actor for `(agents, window_s)`, if the node has one.
  caf::actor stats;
  /// Remote (or local) event subscribers, each monitored.
  std::vector<caf::actor> subscribers;
  static inline const char* name = "tasksup.node_door";
};

using door_actor = caf::stateful_actor<door_state>;

/// Sends `xs...` to the registry as the door's own request and answers the
/// current request with the registry's answer. Unlike `delegate`, the
/// answer comes from the door: the registry's address never reaches the
/// client, so its internal handlers stay out of reach.
template<class R, class... Ts>
caf::result<R> forward(door_actor* self, Ts&&... xs) {
  auto rp = self->make_response_promise();
  self->request(self->state.registry, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp](R& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::behavior door(door_actor* self, caf::actor registry, caf::actor stats) {
  self->state.registry = registry;
  self->state.stats = stats;
  // Anything outside the client protocol: a request gets
  // unexpected_message, an asynchronous message is dropped, and nothing is
  // printed (a peer must not be able to flood the node's log).
  self->set_default_handler(caf::drop);
  self->monitor(registry);
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.registry.address()) {
      self->quit(dm.reason);
      return;
    }
    auto& subs = st.subscribers;
    subs.erase(
      std::remove_if(subs.begin(), subs.end(),
                     [&](auto& x) { return x.address() == dm.source; }),
      subs.end());
  });
  self
    ->request(registry, caf::infinite, subscribe_atom::value,
              caf::actor_cast<caf::actor>(self))
    .then([](bool) {},
          [=](caf::error& err) {
            // Without events the door cannot serve `events --follow`.
            self->quit(std::move(err));
          });
  return {
    [=](submit_atom, task_spec& task) {
      return forward<std::string>(self, submit_atom::value, std::move(task));
    },
    [=](submit_json_atom, std::string& text) -> caf::result<std::string> {
      if (text.size() > wire::max_task_json_bytes)
        return make_error(
          protocol_error::invalid_task,
          "the task is " + std::to_string(text.size()) + " bytes; at most " +
            std::to_string(wire::max_task_json_bytes) + " are accepted");
      return forward<std::string>(self, submit_json_atom::value,
                                  std::move(text));
    },
    [=](stop_atom, std::string& task_id, stop_mode mode) -> caf::result<bool> {
      // Loading rejects other values; checked again because an in-process
      // sender skips the deserializer.
      if (!detail::valid_enum_value(mode))
        return caf::make_error(caf::sec::invalid_argument,
                               "stop: unknown stop mode");
      return forward<bool>(self, stop_atom::value, std::move(task_id), mode);
    },
    [=](retry_now_atom, std::string& task_id) {
      return forward<bool>(self, retry_now_atom::value, std::move(task_id));
    },
    [=](force_fallback_atom, std::string& task_id) {
      return forward<bool>(self, force_fallback_atom::value,
                           std::move(task_id));
    },
    [=](status_atom) {
      return forward<std::vector<task_status>>(self, status_atom::value);
    },
    [=](view_atom) -> caf::result<std::string> {
      if (!self->state.stats)
        return caf::make_error(caf::sec::unexpected_message,
                               "view: this node keeps no statistics");
      auto rp = self->make_response_promise<std::string>();
      self->request(self->state.stats, caf::infinite, view_atom::value)
        .then([rp](std::string& x) mutable { rp.deliver(std::move(x)); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](agents_atom, double window_s) -> caf::result<std::string> {
      if (!self->state.stats)
        return caf::make_error(caf::sec::unexpected_message,
                               "agents: this node keeps no statistics");
      auto rp = self->make_response_promise<std::string>();
      self
        ->request(self->state.stats, caf::infinite, agents_atom::value,
                  window_s)
        .then([rp](std::string& x) mutable { rp.deliver(std::move(x)); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](status_atom, std::string& task_id) {
      return forward<task_status>(self, status_atom::value, std::move(task_id));
    },
    [=](submit_json_atom, std::string& text,
        bool replace) -> caf::result<std::string> {
      if (text.size() > wire::max_task_json_bytes)
        return make_error(
          protocol_error::invalid_task,
          "the task is " + std::to_string(text.size()) + " bytes; at most " +
            std::to_string(wire::max_task_json_bytes) + " are accepted");
      return forward<std::string>(self, submit_json_atom::value,
                                  std::move(text), replace);
    },
    [=](logs_atom, std::string& task_id, int attempt, std::uint64_t offset) {
      auto rp = self->make_response_promise();
      self
        ->request(self->state.registry, caf::infinite, logs_atom::value,
                  std::move(task_id), attempt, offset)
        .then(
          [rp](int a, std::uint64_t next, std::string& data,
               bool complete) mutable {
            rp.deliver(a, next, std::move(data), complete);
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    // A worker node joining this coordinator (its agent then gets the
    // attempts placed on it).
    [=](join_atom, node_offer& offer, caf::actor& agent) {
      return forward<std::string>(self, join_atom::value, std::move(offer),
                                  std::move(agent));
    },
    [=](nodes_atom) {
      return forward<std::vector<node_info>>(self, nodes_atom::value);
    },
    [=](await_atom, std::string& task_id) {
      return forward<task_result>(self, await_atom::value, std::move(task_id));
    },
    [=](subscribe_atom, const caf::actor& sub) -> caf::result<bool> {
      if (!sub)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: no subscriber given");
      auto& subs = self->state.subscribers;
      if (std::find(subs.begin(), subs.end(), sub) != subs.end())
        return true;
      if (subs.size() >= wire::max_subscribers)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: the node serves at most " +
                                 std::to_string(wire::max_subscribers) +
                                 " event subscribers");
      subs.push_back(sub);
      self->monitor(sub);
      return true;
    },
    [=](subscribe_atom, const caf::actor& sub,
        std::string& task_id) -> caf::result<std::vector<event>> {
      // The task's past events, then its new ones: the registry's answer
      // and its later events reach the door in order, so adding `sub` when
      // the answer arrives loses nothing and repeats nothing.
      if (!sub)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: no subscriber given");
      if (self->state.subscribers.size() >= wire::max_subscribers)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: the node serves at most " +
                                 std::to_string(wire::max_subscribers) +
                                 " event subscribers");
      auto rp = self->make_response_promise<std::vector<event>>();
      self
        ->request(self->state.registry, caf::infinite, subscribe_atom::value,
                  caf::actor_cast<caf::actor>(self), std::move(task_id))
        .then(
          [=](std::vector<event>& past) mutable {
            auto& subs = self->state.subscribers;
            if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
              subs.push_back(sub);
              self->monitor(sub);
            }
            rp.deliver(std::move(past));
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](unsubscribe_atom, const caf::actor& sub) {
      auto& subs = self->state.subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), sub), subs.end());
      return true;
    },
    [=](event_atom, const event& ev) {
      // Only the registry's events are passed on; one sent to the door by
      // anyone else (a forged event) is dropped.
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(self->state.registry))
        return;
      for (auto& sub : self->state.subscribers)
        self->send(sub, event_atom::value, ev);
    },
  };
}

} // namespace

caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry) {
  return sys.spawn(door, std::move(registry), caf::actor{});
}

caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry,
                           caf::actor stats) {
  return sys.spawn(door, std::move(registry), std::move(stats));
}

} // namespace tasksup

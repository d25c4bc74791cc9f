#include "tasksup/actors/node_door_actor.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/wire_limits.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/delegated.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

/// The door's own timer: check for stalled subscribers.
using door_check_atom = caf::atom_constant<caf::atom("doorcheck")>;

/// An event subscriber and what it has not acknowledged yet.
struct subscriber {
  caf::actor who;
  /// Events sent since it subscribed, and how many it acknowledged.
  std::uint64_t sent = 0;
  std::uint64_t acked = 0;
  /// Cost (`event_cost`) of each unacknowledged event, oldest first.
  std::deque<std::size_t> unacked;
  std::size_t unacked_bytes = 0;
  /// When it last made progress: subscribed, acknowledged more, or had
  /// events wait for it after having none.
  caf::actor_clock::time_point progress;
};

std::size_t event_cost(const event& ev) {
  return ev.json().size() + ev.task_id.size() + door_event_overhead_bytes;
}

struct door_state {
  caf::actor registry;
  /// The statistics actor for `(agents, window_s)`, if the node has one.
  caf::actor stats;
  /// Remote (or local) event subscribers, each monitored.
  std::vector<subscriber> subscribers;
  /// The unacknowledged bytes of all subscribers.
  std::size_t unacked_bytes = 0;
  /// Whether a `door_check` is on its way.
  bool check_pending = false;
  /// Told of each drop, if set.
  door_log_fn log;
  static inline const char* name = "tasksup.node_door";
};

using door_actor = caf::stateful_actor<door_state>;

std::vector<subscriber>::iterator find_subscriber(door_actor* self,
                                                  const caf::actor_addr& who) {
  auto& subs = self->state.subscribers;
  return std::find_if(subs.begin(), subs.end(), [&](const subscriber& x) {
    return x.who.address() == who;
  });
}

/// Adds `sub` (once) and monitors it.
void add_subscriber(door_actor* self, const caf::actor& sub) {
  if (find_subscriber(self, sub.address()) != self->state.subscribers.end())
    return;
  subscriber s;
  s.who = sub;
  s.progress = self->clock().now();
  self->state.subscribers.push_back(std::move(s));
  self->monitor(sub);
}

/// Forgets `*i` (its backlog no longer counts); returns the next one.
std::vector<subscriber>::iterator forget(door_actor* self,
                                         std::vector<subscriber>::iterator i) {
  self->state.unacked_bytes -= i->unacked_bytes;
  self->demonitor(i->who);
  return self->state.subscribers.erase(i);
}

/// Tells `*i` it gets no more events, and why, and forgets it.
std::vector<subscriber>::iterator drop(door_actor* self,
                                       std::vector<subscriber>::iterator i,
                                       const std::string& why) {
  auto text = "dropped: did not keep up (" + why + "; " +
              std::to_string(i->unacked.size()) +
              " events sent and not acknowledged)";
  if (self->state.log)
    self->state.log("event subscriber " + caf::to_string(i->who.address()) +
                    " " + text);
  self->send(i->who, dropped_atom::value,
             text + "; the node sends this subscriber no more events");
  return forget(self, i);
}

/// Makes sure a check comes no later than the first stall deadline.
void schedule_check(door_actor* self) {
  auto& st = self->state;
  if (st.check_pending)
    return;
  std::optional<caf::actor_clock::time_point> first;
  for (auto& s : st.subscribers)
    if (!s.unacked.empty() && (!first || s.progress < *first))
      first = s.progress;
  if (!first)
    return;
  auto due = *first + door_stall_timeout;
  auto now = self->clock().now();
  auto delay = due > now ? std::chrono::duration_cast<caf::timespan>(due - now)
                         : caf::timespan{0};
  st.check_pending = true;
  self->delayed_send(self, delay, door_check_atom::value);
}

/// Drops every subscriber that has acknowledged nothing for
/// `door_stall_timeout` while events wait for it.
void check_stalled(door_actor* self) {
  auto now = self->clock().now();
  auto& subs = self->state.subscribers;
  for (auto i = subs.begin(); i != subs.end();) {
    if (!i->unacked.empty() && now - i->progress >= door_stall_timeout)
      i = drop(self, i,
               "no acknowledgement for " +
                 std::to_string(door_stall_timeout.count()) +
                 " s while events waited");
    else
      ++i;
  }
}

/// Sends `ev` to every subscriber; one whose backlog would pass a cap is
/// dropped instead.
void fan_out(door_actor* self, const event& ev) {
  auto& st = self->state;
  auto cost = event_cost(ev);
  auto now = self->clock().now();
  for (auto i = st.subscribers.begin(); i != st.subscribers.end();) {
    auto& s = *i;
    if (s.unacked.size() + 1 > door_max_unacked_events) {
      i = drop(self, i,
               "more than " + std::to_string(door_max_unacked_events) +
                 " events waiting");
      continue;
    }
    if (s.unacked_bytes + cost > door_max_unacked_bytes) {
      i = drop(self, i,
               "more than " + std::to_string(door_max_unacked_bytes >> 20) +
                 " MiB of events waiting");
      continue;
    }
    if (s.unacked.empty())
      s.progress = now;
    self->send(s.who, event_atom::value, ev);
    ++s.sent;
    s.unacked.push_back(cost);
    s.unacked_bytes += cost;
    st.unacked_bytes += cost;
    ++i;
  }
  // All together within their budget: the furthest behind go first.
  while (st.unacked_bytes > door_max_unacked_total_bytes) {
    auto worst = std::max_element(st.subscribers.begin(), st.subscribers.end(),
                                  [](const subscriber& a, const subscriber& b) {
                                    return a.unacked_bytes < b.unacked_bytes;
                                  });
    if (worst == st.subscribers.end())
      break;
    drop(self, worst,
         "the subscribers together had more than " +
           std::to_string(door_max_unacked_total_bytes >> 20) +
           " MiB of events waiting, this one the most");
  }
  schedule_check(self);
}

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

caf::behavior door(door_actor* self, caf::actor registry, caf::actor stats,
                   door_log_fn log) {
  self->state.registry = registry;
  self->state.stats = stats;
  self->state.log = std::move(log);
  // Anything outside the client protocol: a request gets
  // unexpected_message, an asynchronous message is dropped, and nothing is
  // printed (a peer must not be able to flood the node's log).
  self->set_default_handler(caf::drop);
  self->monitor(registry);
  // System messages a peer can send too: an error message or an exit
  // message from anyone but this node's own actors ends nothing (by default
  // CAF 0.17 ends an actor on either), and only the registry's own down
  // message ends the door.
  auto local_sender = [=] {
    auto sender = self->current_sender();
    return sender && sender->node() == self->node();
  };
  self->set_error_handler([](caf::error&) {});
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (local_sender() && em.reason)
      self->quit(std::move(em.reason));
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.registry.address()) {
      if (self->current_sender() ==
          caf::actor_cast<caf::strong_actor_ptr>(st.registry))
        self->quit(dm.reason);
      return;
    }
    auto i = find_subscriber(self, dm.source);
    if (i != st.subscribers.end())
      forget(self, i);
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
      if (find_subscriber(self, sub.address()) != subs.end())
        return true;
      if (subs.size() >= wire::max_subscribers)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: the node serves at most " +
                                 std::to_string(wire::max_subscribers) +
                                 " event subscribers");
      add_subscriber(self, sub);
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
            add_subscriber(self, sub);
            rp.deliver(std::move(past));
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](unsubscribe_atom, const caf::actor& sub) {
      auto i = find_subscriber(self, sub.address());
      if (i != self->state.subscribers.end())
        forget(self, i);
      return true;
    },
    [=](ack_atom, std::uint64_t received) -> caf::result<bool> {
      // The sender acknowledges for itself only: nobody can keep another
      // subscriber fed.
      auto served = [&] {
        auto sender = self->current_sender();
        if (!sender)
          return false;
        auto i =
          find_subscriber(self, caf::actor_cast<caf::actor_addr>(sender));
        if (i == self->state.subscribers.end())
          return false;
        auto& s = *i;
        received = std::min(received, s.sent);
        if (received <= s.acked)
          return true;
        for (; s.acked < received; ++s.acked) {
          s.unacked_bytes -= s.unacked.front();
          self->state.unacked_bytes -= s.unacked.front();
          s.unacked.pop_front();
        }
        s.progress = self->clock().now();
        return true;
      }();
      // Only a request is answered: CAF 0.17 would send the answer to a
      // plain `send` back as a message too, one per batch of events.
      if (!self->current_message_id().is_request())
        return caf::delegated<bool>{};
      return served;
    },
    [=](door_check_atom) {
      if (self->current_sender().get() != self->ctrl())
        return;
      self->state.check_pending = false;
      check_stalled(self);
      schedule_check(self);
    },
    [=](event_atom, const event& ev) {
      // Only the registry's events are passed on; one sent to the door by
      // anyone else (a forged event) is dropped.
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(self->state.registry))
        return;
      fan_out(self, ev);
    },
  };
}

} // namespace

caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry) {
  return sys.spawn(door, std::move(registry), caf::actor{}, door_log_fn{});
}

caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry,
                           caf::actor stats) {
  return sys.spawn(door, std::move(registry), std::move(stats), door_log_fn{});
}

caf::actor spawn_node_door(caf::actor_system& sys, caf::actor registry,
                           caf::actor stats, door_log_fn log) {
  return sys.spawn(door, std::move(registry), std::move(stats), std::move(log));
}

} // namespace tasksup

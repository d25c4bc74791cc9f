// The node's door: clients get the registry's answers from the door, the
// registry only ever hears from the door, internal messages never pass, and
// events reach subscribers from the door only when the registry sent them.

#include "tasksup/actors/node_door_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// What the fake registry heard.
struct heard {
  /// One name per message, in order.
  std::vector<std::string> names;
  /// The sender of each.
  std::vector<caf::strong_actor_ptr> senders;
  /// The subscriber the door registered.
  caf::actor subscriber;
};

/// Plays the registry: answers the client protocol with fixed values and
/// records every message and its sender.
caf::actor fake_registry(fixture& fx, std::shared_ptr<heard> out) {
  return fx.keep(fx.sys().spawn([out](caf::event_based_actor* self) {
    auto note = [=](const char* name) {
      out->names.emplace_back(name);
      out->senders.push_back(self->current_sender());
    };
    self->set_default_handler([=](caf::scheduled_actor*, caf::message_view&) {
      note("other");
      return caf::sec::unexpected_message;
    });
    return caf::behavior{
      [=](subscribe_atom, const caf::actor& sub) {
        note("subscribe");
        out->subscriber = sub;
        return true;
      },
      [=](submit_atom, const task_spec& t) {
        note("submit");
        return "id-" + t.id;
      },
      [=](submit_json_atom, const std::string&) {
        note("submit_json");
        return std::string{"id-json"};
      },
      [=](stop_atom, const std::string&, stop_mode mode) {
        note("stop");
        return mode == stop_mode::kill;
      },
      [=](retry_now_atom, const std::string&) {
        note("retry_now");
        return true;
      },
      [=](force_fallback_atom, const std::string&) {
        note("force_fb");
        return false;
      },
      [=](status_atom) {
        note("status");
        return std::vector<task_status>(2);
      },
      [=](status_atom, const std::string& id) -> caf::result<task_status> {
        note("status_id");
        if (id == "missing")
          return make_error(protocol_error::unknown_task, "no task 'missing'");
        task_status s;
        s.task_id = id;
        return s;
      },
      [=](await_atom, const std::string& id) {
        note("await");
        task_result r;
        r.task_id = id;
        r.outcome = task_outcome::succeeded;
        return r;
      },
    };
  }));
}

/// An event subscriber that records each event and who sent it.
struct watcher {
  std::vector<event> events;
  std::vector<caf::strong_actor_ptr> senders;
};

caf::actor spawn_watcher(fixture& fx, std::shared_ptr<watcher> out) {
  return fx.keep(fx.sys().spawn([out](caf::event_based_actor* self) {
    return caf::behavior{
      [=](event_atom, const event& ev) {
        out->events.push_back(ev);
        out->senders.push_back(self->current_sender());
      },
    };
  }));
}

event make_event(const std::string& task_id) {
  event ev;
  ev.kind = event_kind::task_done;
  ev.task_id = task_id;
  ev.json = "{}";
  return ev;
}

} // namespace

TEST_CASE_METHOD(fixture, "the door forwards the client protocol as its own",
                 "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door = keep(spawn_node_door(sys(), reg));
  run();
  REQUIRE(reg_heard->names == std::vector<std::string>{"subscribe"});
  CHECK(reg_heard->subscriber == door);
  task_spec t;
  t.id = "t1";
  CHECK(*ask<std::string>(door, submit_atom::value, t) == "id-t1");
  CHECK(*ask<std::string>(door, submit_json_atom::value, std::string{"{}"}) ==
        "id-json");
  CHECK(*ask<bool>(door, stop_atom::value, std::string{"t1"},
                   stop_mode::kill) == true);
  CHECK(*ask<bool>(door, retry_now_atom::value, std::string{"t1"}) == true);
  CHECK(*ask<bool>(door, force_fallback_atom::value, std::string{"t1"}) ==
        false);
  CHECK(
    ask<std::vector<task_status>>(door, status_atom::value)->value().size() ==
    2);
  CHECK(ask<task_status>(door, status_atom::value, std::string{"t2"})
          ->value()
          .task_id == "t2");
  auto missing =
    *ask<task_status>(door, status_atom::value, std::string{"missing"});
  REQUIRE_FALSE(missing);
  CHECK(error_text(missing.error()) == "no task 'missing'");
  CHECK(ask<task_result>(door, await_atom::value, std::string{"t3"})
          ->value()
          .task_id == "t3");
  CHECK(reg_heard->names ==
        std::vector<std::string>{"subscribe", "submit", "submit_json", "stop",
                                 "retry_now", "force_fb", "status", "status_id",
                                 "status_id", "await"});
  // The registry heard every request from the door, never from a client.
  for (auto& sender : reg_heard->senders)
    CHECK(sender == caf::actor_cast<caf::strong_actor_ptr>(door));
}

TEST_CASE_METHOD(fixture, "the door refuses internal messages", "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door = keep(spawn_node_door(sys(), reg));
  run();
  auto refused = [](const std::optional<caf::expected<bool>>& x) {
    return x && !*x && x->error() == caf::sec::unexpected_message;
  };
  CHECK(refused(ask<bool>(door, permit_atom::value,
                          permit_request{"t1", "a", true, true, {}, false})));
  CHECK(refused(ask<bool>(door, release_atom::value, std::string{"t1"})));
  CHECK(refused(
    ask<bool>(door, agent_result_atom::value, std::string{"a"}, false)));
  task_result r;
  r.task_id = "t1";
  CHECK(refused(ask<bool>(door, escalate_atom::value, r)));
  // Asynchronous ones are dropped.
  caf::anon_send(door, agent_result_atom::value, std::string{"a"}, false);
  caf::anon_send(door, escalate_atom::value, r);
  run();
  CHECK(reg_heard->names == std::vector<std::string>{"subscribe"});
  // The door still serves clients.
  CHECK(*ask<bool>(door, retry_now_atom::value, std::string{"t1"}));
}

TEST_CASE_METHOD(fixture, "the door streams only the registry's events",
                 "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door = keep(spawn_node_door(sys(), reg));
  run();
  auto seen = std::make_shared<watcher>();
  auto sub = spawn_watcher(*this, seen);
  REQUIRE(*ask<bool>(door, subscribe_atom::value, sub));
  // A forged event, sent to the door by someone other than the registry.
  caf::anon_send(door, event_atom::value, make_event("FORGED"));
  auto forger = keep(sys().spawn([door](caf::event_based_actor* self) {
    self->send(door, event_atom::value, make_event("FORGED-2"));
  }));
  run();
  // The registry's event, as the registry sends it to its subscriber.
  caf::send_as(reg, door, event_atom::value, make_event("real"));
  run();
  REQUIRE(seen->events.size() == 1);
  CHECK(seen->events[0].task_id == "real");
  CHECK(seen->senders[0] == caf::actor_cast<caf::strong_actor_ptr>(door));
  REQUIRE(*ask<bool>(door, unsubscribe_atom::value, sub));
  caf::send_as(reg, door, event_atom::value, make_event("after"));
  run();
  CHECK(seen->events.size() == 1);
}

TEST_CASE_METHOD(fixture, "the door refuses oversized task text unforwarded",
                 "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door = keep(spawn_node_door(sys(), reg));
  run();
  auto r = *ask<std::string>(door, submit_json_atom::value,
                             std::string(wire::max_task_json_bytes + 1, ' '));
  REQUIRE_FALSE(r);
  CHECK(r.error().category() == protocol_error_category);
  CHECK(reg_heard->names == std::vector<std::string>{"subscribe"});
}

TEST_CASE_METHOD(fixture, "the door ends with the registry", "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door = spawn_node_door(sys(), reg);
  run();
  auto ended = std::make_shared<bool>(false);
  keep(sys().spawn([door, ended](caf::event_based_actor* self) {
    self->monitor(door);
    self->set_down_handler([=](const caf::down_msg&) { *ended = true; });
    return caf::behavior{[](int) {}};
  }));
  run();
  caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
  run();
  CHECK(*ended);
}

// The node's door bounds what clients leave pending: awaits end after the
// await timeout, a client's awaits and subscriptions stop at the per-client
// cap and everyone's at the node-wide cap, each with an error naming the
// cap; a task's awaits cost the registry one request and are all answered
// when it ends. Control requests are audited, naming the client.

#include "tasksup/actors/node_door_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// Test -> holding registry: answer every await of the task with success.
using finish_atom = caf::atom_constant<caf::atom("finish")>;

/// What the holding registry saw.
struct held {
  std::vector<std::string> awaited;
  std::vector<caf::response_promise> promises;
  std::vector<event> events;
};

/// Plays a registry whose tasks run until told to finish: awaits stay
/// pending until then.
caf::actor holding_registry(fixture& fx, std::shared_ptr<held> out) {
  return fx.keep(fx.sys().spawn([out](caf::event_based_actor* self) {
    return caf::behavior{
      [=](subscribe_atom, const subscriber_actor&) { return true; },
      [=](await_atom, const std::string& id) {
        out->awaited.push_back(id);
        auto rp = self->make_response_promise();
        out->promises.push_back(rp);
        return rp;
      },
      [=](finish_atom, const std::string& id) {
        task_result r;
        r.task_id = id;
        r.outcome = task_outcome::succeeded;
        for (auto& rp : out->promises)
          rp.deliver(r);
        out->promises.clear();
      },
      [=](stop_atom, const std::string&, stop_mode) { return true; },
      [=](retry_now_atom, const std::string&) { return true; },
      [=](force_fallback_atom, const std::string&) { return true; },
      [=](event_atom, const event& ev) { out->events.push_back(ev); },
    };
  }));
}

/// The answers one client got, in order: a result's task id, or the error
/// text prefixed with its code's name.
struct answers {
  std::vector<std::string> texts;
  std::size_t results = 0;
  std::size_t timeouts = 0;
  std::size_t limits = 0;
};

/// One client (one actor) that sends `n` awaits of `task_id` to `door`.
caf::actor awaiting_client(fixture& fx, const caf::actor& door,
                           const std::string& task_id, std::size_t n,
                           std::shared_ptr<answers> out) {
  return fx.keep(fx.sys().spawn([=](caf::event_based_actor* self) {
    for (std::size_t i = 0; i < n; ++i)
      self->request(door, caf::infinite, await_atom::value, task_id)
        .then(
          [=](task_result& r) {
            ++out->results;
            out->texts.push_back(r.task_id);
          },
          [=](caf::error& err) {
            if (err.category() == protocol_error_category) {
              auto code = static_cast<protocol_error>(err.code());
              if (code == protocol_error::await_timeout)
                ++out->timeouts;
              if (code == protocol_error::limit_reached)
                ++out->limits;
              out->texts.push_back(std::string{to_string(code)} + ": " +
                                   error_text(err));
            } else {
              out->texts.push_back(caf::to_string(err));
            }
          });
    return caf::behavior{[](int) {}};
  }));
}

door_options limits(std::size_t per_client, std::size_t total,
                    double timeout_s) {
  door_options opts;
  opts.max_pending_per_client = per_client;
  opts.max_pending = total;
  opts.await_timeout = std::chrono::duration_cast<caf::timespan>(
    std::chrono::duration<double>(timeout_s));
  return opts;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "an await ends with await_timeout after the timeout, and "
                 "not before",
                 "[door][pending]") {
  auto reg_held = std::make_shared<held>();
  auto reg = holding_registry(*this, reg_held);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(10, 100, 60)));
  run();
  auto first =
    ask_later<task_result>(door, await_atom::value, std::string{"long"});
  run();
  advance(30);
  auto second =
    ask_later<task_result>(door, await_atom::value, std::string{"long"});
  run();
  advance(29.5);
  CHECK_FALSE(first->has_value());
  advance(0.5);
  REQUIRE(first->has_value());
  REQUIRE_FALSE(static_cast<bool>(first->value()));
  auto& err = first->value().error();
  CHECK(err.category() == protocol_error_category);
  CHECK(static_cast<protocol_error>(err.code()) ==
        protocol_error::await_timeout);
  CHECK(error_text(err) ==
        "await: task 'long' has not finished after 60 s (the node's await "
        "timeout); await it again to keep waiting");
  // The later await has its own 60 s.
  CHECK_FALSE(second->has_value());
  advance(29.5);
  CHECK_FALSE(second->has_value());
  advance(0.5);
  REQUIRE(second->has_value());
  CHECK_FALSE(static_cast<bool>(second->value()));
  // A timed-out await no longer counts: a new one is taken, and answered
  // when the task ends; the registry was asked once for the task.
  auto third =
    ask_later<task_result>(door, await_atom::value, std::string{"long"});
  run();
  caf::anon_send(reg, finish_atom::value, std::string{"long"});
  run();
  REQUIRE(third->has_value());
  REQUIRE(static_cast<bool>(third->value()));
  CHECK(third->value()->task_id == "long");
  CHECK(reg_held->awaited == std::vector<std::string>{"long"});
}

TEST_CASE_METHOD(fixture,
                 "a client's awaits past the per-client cap are refused with "
                 "an error naming the cap, other clients are still served",
                 "[door][pending]") {
  auto reg_held = std::make_shared<held>();
  auto reg = holding_registry(*this, reg_held);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(3, 100, 600)));
  run();
  auto greedy = std::make_shared<answers>();
  awaiting_client(*this, door, "t1", 5, greedy);
  run();
  REQUIRE(greedy->limits == 2);
  CHECK(greedy->results == 0);
  CHECK(greedy->texts.front() ==
        "limit_reached: await: this client has 3 awaits and event "
        "subscriptions pending, the most the node allows one client "
        "(max_pending_per_client = 3); try again once some were answered");
  // Another client has its own allowance.
  auto other = std::make_shared<answers>();
  awaiting_client(*this, door, "t1", 3, other);
  run();
  CHECK(other->limits == 0);
  // The per-client count covers subscriptions too.
  auto sub = keep(sys().spawn([](caf::event_based_actor*) {
    return caf::behavior{[](event_atom, const event&) {}};
  }));
  auto subscribed = std::make_shared<std::optional<caf::error>>();
  auto third = std::make_shared<answers>();
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(door, caf::infinite, await_atom::value, std::string{"t1"})
      .then([=](task_result&) { ++third->results; },
            [=](caf::error&) { ++third->limits; });
    self->request(door, caf::infinite, await_atom::value, std::string{"t1"})
      .then([=](task_result&) { ++third->results; },
            [=](caf::error&) { ++third->limits; });
    self->request(door, caf::infinite, await_atom::value, std::string{"t1"})
      .then([=](task_result&) { ++third->results; },
            [=](caf::error&) { ++third->limits; });
    self
      ->request(door, caf::infinite, subscribe_atom::value,
                caf::actor_cast<subscriber_actor>(sub))
      .then([=](bool) { *subscribed = caf::error{}; },
            [=](caf::error& err) { *subscribed = err; });
  });
  run();
  REQUIRE(subscribed->has_value());
  REQUIRE(**subscribed);
  CHECK(error_text(**subscribed).rfind("subscribe: this client has 3 ", 0) ==
        0);
  // When the task ends, every pending await is answered, and the client's
  // allowance is back.
  caf::anon_send(reg, finish_atom::value, std::string{"t1"});
  run();
  CHECK(greedy->results == 3);
  CHECK(other->results == 3);
  CHECK(third->results == 3);
  auto again = std::make_shared<answers>();
  awaiting_client(*this, door, "t2", 3, again);
  run();
  CHECK(again->limits == 0);
  CHECK(reg_held->awaited == std::vector<std::string>{"t1", "t2"});
}

TEST_CASE_METHOD(fixture,
                 "awaits past the node-wide cap are refused with an error "
                 "naming it",
                 "[door][pending]") {
  auto reg = holding_registry(*this, std::make_shared<held>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(10, 4, 600)));
  run();
  auto a = std::make_shared<answers>();
  auto b = std::make_shared<answers>();
  awaiting_client(*this, door, "t1", 3, a);
  run();
  awaiting_client(*this, door, "t1", 3, b);
  run();
  CHECK(a->limits == 0);
  REQUIRE(b->limits == 2);
  CHECK(b->texts.front() ==
        "limit_reached: await: the node has 4 awaits and event subscriptions "
        "pending, the most it allows (max_pending = 4); try again once some "
        "were answered");
  // Timed-out awaits free their places.
  advance(600);
  CHECK(a->timeouts == 3);
  CHECK(b->timeouts == 1);
  auto c = std::make_shared<answers>();
  awaiting_client(*this, door, "t1", 4, c);
  run();
  CHECK(c->limits == 0);
}

TEST_CASE_METHOD(fixture,
                 "many awaits of one task cost the registry one request and "
                 "are all answered when it ends",
                 "[door][pending]") {
  auto reg_held = std::make_shared<held>();
  auto reg = holding_registry(*this, reg_held);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(20000, 20000, 600)));
  run();
  auto a = std::make_shared<answers>();
  awaiting_client(*this, door, "big", 20000, a);
  run();
  CHECK(reg_held->awaited.size() == 1);
  caf::anon_send(reg, finish_atom::value, std::string{"big"});
  run();
  // 1,000 at once, then 1,000 every 20 ms; other requests pass in between.
  CHECK(a->results == 1000);
  auto between =
    ask_later<bool>(door, retry_now_atom::value, std::string{"other"});
  run();
  REQUIRE(between->has_value());
  CHECK(a->results == 1000);
  advance(0.019);
  CHECK(a->results == 1000);
  advance(0.001);
  CHECK(a->results == 2000);
  for (int i = 0; i < 18; ++i)
    advance(0.02);
  CHECK(a->results == 20000);
  CHECK(a->limits == 0);
}

TEST_CASE_METHOD(fixture,
                 "a burst of await timeouts goes out 1,000 at a time, 20 ms "
                 "apart",
                 "[door][pending]") {
  auto reg = holding_registry(*this, std::make_shared<held>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(5000, 5000, 60)));
  run();
  auto a = std::make_shared<answers>();
  awaiting_client(*this, door, "long", 2500, a);
  run();
  advance(60);
  CHECK(a->timeouts == 1000);
  advance(0.02);
  CHECK(a->timeouts == 2000);
  advance(0.02);
  CHECK(a->timeouts == 2500);
  CHECK(a->results == 0);
}

TEST_CASE_METHOD(fixture,
                 "every control request is audited with the client, the "
                 "action and the task",
                 "[door][audit]") {
  auto reg_held = std::make_shared<held>();
  auto reg = holding_registry(*this, reg_held);
  auto lines = std::make_shared<std::vector<std::string>>();
  auto opts = limits(10, 10, 60);
  opts.audit = [lines](const std::string& x) { lines->push_back(x); };
  auto door = keep_dynamic(spawn_node_door(
    sys(), caf::actor_cast<registry_actor>(reg), stats_actor{}, opts));
  run();
  CHECK(
    *ask<bool>(door, stop_atom::value, std::string{"t1"}, stop_mode::cancel));
  CHECK(*ask<bool>(door, stop_atom::value, std::string{"t2"}, stop_mode::kill));
  CHECK(*ask<bool>(door, retry_now_atom::value, std::string{"t3"}));
  CHECK(*ask<bool>(door, force_fallback_atom::value, std::string{"t4"}));
  REQUIRE(lines->size() == 4);
  auto has = [&](std::size_t i, const std::string& what) {
    return (*lines)[i].find(what) != std::string::npos;
  };
  CHECK(has(0, "asked to stop task 't1'"));
  CHECK(has(1, "asked to kill task 't2'"));
  CHECK(has(2, "asked to retry-now task 't3'"));
  CHECK(has(3, "asked to fallback-now task 't4'"));
  CHECK(has(0, "audit: local actor "));
  // Each is also a warning event of its task, for its history.
  REQUIRE(reg_held->events.size() == 4);
  CHECK(reg_held->events[1].task_id == "t2");
  CHECK(reg_held->events[1].kind == event_kind::warning);
  CHECK(reg_held->events[1].json().find("asked to kill task") !=
        std::string::npos);
}

TEST_CASE_METHOD(fixture,
                 "a subscriber that ends is dropped and frees its place "
                 "under the caps",
                 "[door][pending]") {
  auto reg = holding_registry(*this, std::make_shared<held>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg),
                                 stats_actor{}, limits(10, 1, 600)));
  run();
  auto listener = [&] {
    return sys().spawn([](caf::event_based_actor*) {
      return caf::behavior{[](event_atom, const event&) {}};
    });
  };
  auto first = listener();
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(first)));
  // The node-wide cap of 1 is reached.
  auto second = keep(listener());
  auto refused = *ask<bool>(door, subscribe_atom::value,
                            caf::actor_cast<subscriber_actor>(second));
  REQUIRE_FALSE(static_cast<bool>(refused));
  CHECK(error_text(refused.error()).find("(max_pending = 1)") !=
        std::string::npos);
  // The first subscriber goes away (as a client whose connection closed):
  // its place is free again.
  caf::anon_send_exit(first, caf::exit_reason::kill);
  run();
  CHECK(*ask<bool>(door, subscribe_atom::value,
                   caf::actor_cast<subscriber_actor>(second)));
}

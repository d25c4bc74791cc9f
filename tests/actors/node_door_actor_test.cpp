// The node's door: clients get the registry's answers from the door, the
// registry only ever hears from the door, internal messages never pass,
// events reach subscribers from the door only when the registry sent them,
// and subscribers that do not keep up are dropped (and only those).

#include "tasksup/actors/node_door_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
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
  subscriber_actor subscriber;
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
      [=](subscribe_atom, const subscriber_actor& sub) {
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
      [=](event_atom, const event&) {
        // The door's audit of a control request.
        note("event");
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
  ev.body = json_event_body("", "", "{}");
  return ev;
}

} // namespace

TEST_CASE_METHOD(fixture, "the door forwards the client protocol as its own",
                 "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
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
  CHECK(reg_heard->names == std::vector<std::string>{
                              "subscribe", "submit", "submit_json", "event",
                              "stop", "event", "retry_now", "event", "force_fb",
                              "status", "status_id", "status_id", "await"});
  // The registry heard every request from the door, never from a client.
  for (auto& sender : reg_heard->senders)
    CHECK(sender == caf::actor_cast<caf::strong_actor_ptr>(door));
}

TEST_CASE_METHOD(fixture, "the door refuses internal messages", "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  auto refused = [](const std::optional<caf::expected<bool>>& x) {
    return x && !*x && x->error() == caf::sec::unexpected_message;
  };
  CHECK(
    refused(ask<bool>(door, permit_atom::value,
                      permit_request{"t1", "a", "", true, true, {}, false})));
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
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  auto seen = std::make_shared<watcher>();
  auto sub = spawn_watcher(*this, seen);
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(sub)));
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
  REQUIRE(*ask<bool>(door, unsubscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(sub)));
  caf::send_as(reg, door, event_atom::value, make_event("after"));
  run();
  CHECK(seen->events.size() == 1);
}

TEST_CASE_METHOD(fixture, "the door refuses oversized task text unforwarded",
                 "[door]") {
  auto reg_heard = std::make_shared<heard>();
  auto reg = fake_registry(*this, reg_heard);
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
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
  auto door = caf::actor_cast<caf::actor>(
    spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
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

// Back-pressure on event subscribers: each acknowledges what it handled,
// and the door drops one that acknowledges nothing for door_stall_timeout
// while events wait for it, or whose backlog passes a cap.

namespace {

/// What a back-pressure test subscriber saw.
struct reader_log {
  std::size_t events = 0;
  /// The `(dropped, reason)` notice, and when (simulated seconds since the
  /// log was made) it came.
  std::optional<std::string> dropped;
  double dropped_at = -1;
  /// Answers to its acknowledgements: false once it is no longer served.
  std::vector<bool> ack_answers;
};

using clock_point = caf::actor_clock::time_point;

double since(clock_point t0, clock_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

/// A subscriber of `door` that acknowledges every `every` events it gets
/// (0: never), when it is sent `(ack)`, and, with `period_s` > 0, what it
/// got so far once per `period_s` of (simulated) time while `*ticking`.
caf::actor spawn_reader(fixture& fx, caf::actor door,
                        std::shared_ptr<reader_log> out, std::size_t every,
                        double period_s = 0,
                        std::shared_ptr<bool> ticking = nullptr) {
  using tick_atom = caf::atom_constant<caf::atom("rtick")>;
  auto t0 = fx.sys().clock().now();
  return fx.keep(fx.sys().spawn([=](caf::event_based_actor* self) {
    auto period = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(period_s));
    auto ack = [=] {
      self
        ->request(door, caf::infinite, ack_atom::value,
                  std::uint64_t{out->events})
        .then([=](bool x) { out->ack_answers.push_back(x); },
              [](caf::error&) {});
    };
    if (period_s > 0)
      self->delayed_send(self, period, tick_atom::value);
    return caf::behavior{
      [=](event_atom, const event&) {
        ++out->events;
        if (every > 0 && out->events % every == 0)
          ack();
      },
      [=](dropped_atom, const std::string& why) {
        out->dropped = why;
        out->dropped_at = since(t0, self->clock().now());
      },
      // The test's cue to acknowledge now.
      [=](ack_atom) { ack(); },
      [=](tick_atom) {
        ack();
        if (ticking && *ticking)
          self->delayed_send(self, period, tick_atom::value);
      },
    };
  }));
}

event sized_event(const std::string& task_id, std::size_t json_bytes) {
  event ev;
  ev.kind = event_kind::log;
  ev.task_id = task_id;
  ev.body = json_event_body("", "", std::string(json_bytes, 'x'));
  return ev;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "the door drops a subscriber that acknowledges nothing for "
                 "the stall timeout while events wait, and not before",
                 "[door]") {
  auto reg = fake_registry(*this, std::make_shared<heard>());
  auto node_log = std::make_shared<std::vector<std::string>>();
  auto door = keep_dynamic(spawn_node_door(
    sys(), caf::actor_cast<registry_actor>(reg), stats_actor{},
    [node_log](const std::string& x) { node_log->push_back(x); }));
  run();
  auto mute = std::make_shared<reader_log>();
  auto mute_sub = spawn_reader(*this, door, mute, 0);
  auto live = std::make_shared<reader_log>();
  auto live_sub = spawn_reader(*this, door, live, 1);
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(mute_sub)));
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(live_sub)));
  // No events, no stall: quiet subscribers stay however long.
  advance(60);
  caf::send_as(reg, door, event_atom::value, make_event("t1"));
  run();
  advance(door_stall_timeout.count() - 0.5);
  // More events while the first still waits do not restart its clock.
  caf::send_as(reg, door, event_atom::value, make_event("t2"));
  run();
  CHECK_FALSE(mute->dropped);
  advance(0.5);
  REQUIRE(mute->dropped);
  CHECK(mute->dropped->rfind("dropped: did not keep up", 0) == 0);
  CHECK(mute->dropped->find("no acknowledgement for 10 s") !=
        std::string::npos);
  CHECK(mute->dropped_at == Approx(60 + door_stall_timeout.count()));
  CHECK(mute->events == 2);
  // The node's log names the subscriber and says why.
  REQUIRE(node_log->size() == 1);
  CHECK(node_log->front().find(caf::to_string(mute_sub.address())) !=
        std::string::npos);
  CHECK(node_log->front().find("no acknowledgement for 10 s") !=
        std::string::npos);
  // It gets nothing more, and its late acknowledgement is refused.
  caf::send_as(reg, door, event_atom::value, make_event("t3"));
  run();
  CHECK(mute->events == 2);
  caf::anon_send(mute_sub, ack_atom::value);
  run();
  CHECK(mute->ack_answers == std::vector<bool>{false});
  // The subscriber that acknowledged each event is still served.
  CHECK_FALSE(live->dropped);
  CHECK(live->events == 3);
  advance(3 * door_stall_timeout.count());
  CHECK_FALSE(live->dropped);
}

TEST_CASE_METHOD(fixture,
                 "a subscriber that acknowledges late is timed from its last "
                 "acknowledgement",
                 "[door]") {
  auto reg = fake_registry(*this, std::make_shared<heard>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  auto slow = std::make_shared<reader_log>();
  keep(sys().spawn([door](caf::event_based_actor* self) {
    self->monitor(door);
    self->set_down_handler([](const caf::down_msg& dm) {
      printf("DOOR DOWN %s\n", caf::to_string(dm.reason).c_str());
    });
    return caf::behavior{[](int) {}};
  }));
  auto sub = spawn_reader(*this, door, slow, 0);
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(sub)));
  for (int i = 0; i < 3; ++i)
    caf::send_as(reg, door, event_atom::value, make_event("t"));
  run();
  // It acknowledges one event after 9 s, then nothing more: the two
  // others wait, and its clock restarts at the acknowledgement.
  advance(9);
  caf::send_as(sub, door, ack_atom::value, std::uint64_t{1});
  run();
  advance(door_stall_timeout.count() - 1);
  CHECK_FALSE(slow->dropped);
  advance(1);
  CHECK(slow->dropped);
  // An acknowledgement sent by someone else for it would not have counted:
  // only the sender's own events are acknowledged.
  auto other = std::make_shared<reader_log>();
  auto other_sub = spawn_reader(*this, door, other, 0);
  REQUIRE(*ask<bool>(door, subscribe_atom::value,
                     caf::actor_cast<subscriber_actor>(other_sub)));
  caf::send_as(reg, door, event_atom::value, make_event("t"));
  run();
  advance(door_stall_timeout.count() - 1);
  caf::anon_send(door, ack_atom::value, std::uint64_t{1});
  CHECK(ask<bool>(door, ack_atom::value, std::uint64_t{1})->value() == false);
  advance(1);
  CHECK(other->dropped);
}

TEST_CASE_METHOD(fixture,
                 "subscribers that keep acknowledging are never dropped, "
                 "however large the burst",
                 "[door]") {
  auto reg = fake_registry(*this, std::make_shared<heard>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  auto ticking = std::make_shared<bool>(true);
  // One acknowledges every 64 events and every quarter second (as
  // `events --follow` does), one only every 2 s (what it has read by
  // then), one every 9 s.
  auto batched = std::make_shared<reader_log>();
  auto periodic = std::make_shared<reader_log>();
  auto sluggish = std::make_shared<reader_log>();
  for (auto& [log, every, period] :
       {std::tuple{batched, std::size_t{64}, 0.25},
        std::tuple{periodic, std::size_t{0}, 2.0},
        std::tuple{sluggish, std::size_t{0}, 9.0}}) {
    auto sub = spawn_reader(*this, door, log, every, period, ticking);
    REQUIRE(*ask<bool>(door, subscribe_atom::value,
                       caf::actor_cast<subscriber_actor>(sub)));
  }
  // A burst of 50,000 events at once (more than any credit window the
  // door could give), then a steady stream of 1,000 a second for a
  // minute.
  std::size_t total = 0;
  for (; total < 50000; ++total)
    caf::send_as(reg, door, event_atom::value, make_event("burst"));
  run();
  // (Time moves in quarter seconds, so that each timer is handled at its
  // own time.)
  auto pass = [&](double seconds) {
    for (int k = 0; k < static_cast<int>(seconds * 4); ++k)
      advance(0.25);
  };
  for (int second = 0; second < 60; ++second) {
    for (int i = 0; i < 1000; ++i, ++total)
      caf::send_as(reg, door, event_atom::value, make_event("stream"));
    pass(1);
  }
  // Ten quiet seconds: the last acknowledgements come in.
  pass(10);
  *ticking = false;
  for (auto& log : {batched, periodic, sluggish}) {
    INFO(log->dropped.value_or(""));
    CHECK_FALSE(log->dropped);
    CHECK(log->events == total);
    REQUIRE_FALSE(log->ack_answers.empty());
    CHECK(std::all_of(log->ack_answers.begin(), log->ack_answers.end(),
                      [](bool x) { return x; }));
  }
}

TEST_CASE_METHOD(fixture, "the door drops a subscriber past its hard caps",
                 "[door]") {
  auto reg = fake_registry(*this, std::make_shared<heard>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  SECTION("events") {
    auto mute = std::make_shared<reader_log>();
    auto live = std::make_shared<reader_log>();
    REQUIRE(*ask<bool>(
      door, subscribe_atom::value,
      caf::actor_cast<subscriber_actor>(spawn_reader(*this, door, mute, 0))));
    REQUIRE(*ask<bool>(
      door, subscribe_atom::value,
      caf::actor_cast<subscriber_actor>(spawn_reader(*this, door, live, 64))));
    // All within a second: the stall timeout has no part in it.
    for (std::size_t i = 0; i < door_max_unacked_events; ++i)
      caf::send_as(reg, door, event_atom::value, make_event("t"));
    run();
    CHECK_FALSE(mute->dropped);
    caf::send_as(reg, door, event_atom::value, make_event("t"));
    run();
    REQUIRE(mute->dropped);
    CHECK(mute->dropped->find("more than 65536 events waiting") !=
          std::string::npos);
    CHECK(mute->dropped_at == 0);
    CHECK(mute->events == door_max_unacked_events);
    CHECK_FALSE(live->dropped);
    CHECK(live->events == door_max_unacked_events + 1);
  }
  SECTION("bytes") {
    auto mute = std::make_shared<reader_log>();
    REQUIRE(*ask<bool>(
      door, subscribe_atom::value,
      caf::actor_cast<subscriber_actor>(spawn_reader(*this, door, mute, 0))));
    // Events of 1 MiB of JSON (the most one carries): 63 fit in 64 MiB
    // with their overhead, the 64th does not.
    auto big = sized_event("t", wire::max_text_bytes);
    for (int i = 0; i < 63; ++i)
      caf::send_as(reg, door, event_atom::value, big);
    run();
    CHECK_FALSE(mute->dropped);
    caf::send_as(reg, door, event_atom::value, big);
    run();
    REQUIRE(mute->dropped);
    CHECK(mute->dropped->find("more than 64 MiB of events waiting") !=
          std::string::npos);
    CHECK(mute->events == 63);
  }
  SECTION("all subscribers together") {
    // Five stalled subscribers at 52 MiB each pass the node's 256 MiB:
    // the first furthest behind goes, the others stay until their own
    // caps; a reader that acknowledges stays throughout.
    std::vector<std::shared_ptr<reader_log>> mutes;
    for (int i = 0; i < 5; ++i) {
      mutes.push_back(std::make_shared<reader_log>());
      REQUIRE(*ask<bool>(door, subscribe_atom::value,
                         caf::actor_cast<subscriber_actor>(
                           spawn_reader(*this, door, mutes.back(), 0))));
    }
    auto live = std::make_shared<reader_log>();
    REQUIRE(*ask<bool>(
      door, subscribe_atom::value,
      caf::actor_cast<subscriber_actor>(spawn_reader(*this, door, live, 1))));
    auto big = sized_event("t", wire::max_text_bytes);
    std::size_t sent = 0;
    auto dropped = [&] {
      return std::count_if(mutes.begin(), mutes.end(),
                           [](auto& m) { return m->dropped.has_value(); });
    };
    while (dropped() == 0 && sent < 64) {
      caf::send_as(reg, door, event_atom::value, big);
      run();
      ++sent;
    }
    REQUIRE(dropped() == 1);
    // (The reader's acknowledgement of each event comes after the event.)
    CHECK((sent * 5 + 1) * (big.json().size() + 1 + door_event_overhead_bytes) >
          door_max_unacked_total_bytes);
    CHECK(((sent - 1) * 5 + 1) *
            (big.json().size() + 1 + door_event_overhead_bytes) <=
          door_max_unacked_total_bytes);
    CHECK(mutes[0]->dropped->find("together") != std::string::npos);
    CHECK(live->events == sent);
    CHECK_FALSE(live->dropped);
  }
}

TEST_CASE_METHOD(fixture,
                 "an error, exit or down message from a stranger does not end "
                 "the door",
                 "[door]") {
  auto reg = fake_registry(*this, std::make_shared<heard>());
  auto door =
    keep_dynamic(spawn_node_door(sys(), caf::actor_cast<registry_actor>(reg)));
  run();
  auto stranger = keep(sys().spawn(
    [](caf::event_based_actor*) { return caf::behavior{[](int) {}}; }));
  // By default CAF ends an actor on an error message or a non-normal exit
  // message; a peer can send both.
  caf::send_as(stranger, door, caf::make_error(caf::sec::runtime_error));
  caf::anon_send(door, caf::make_error(caf::sec::runtime_error));
  // (A peer's message has its proxy as sender, or none.)
  caf::anon_send(
    door, caf::exit_msg{stranger.address(), caf::exit_reason::user_shutdown});
  caf::send_as(stranger, door,
               caf::down_msg{reg.address(), caf::exit_reason::user_shutdown});
  run();
  CHECK(*ask<bool>(door, retry_now_atom::value, std::string{"t1"}));
}

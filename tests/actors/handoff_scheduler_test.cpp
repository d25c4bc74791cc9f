// The node's scheduler policy (tasksup/actors/handoff_scheduler.hpp), on
// real worker threads: every message is delivered however actors become
// ready (a chain kept on one thread, a fan-out in one turn, sends from
// threads outside the scheduler), a turn that blocks does not hold back
// what it made ready, and the system shuts down with work queued.

#include "tasksup/actors/handoff_scheduler.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace {

using hop_atom = caf::atom_constant<caf::atom("hhop")>;
using done_atom = caf::atom_constant<caf::atom("hdone")>;
using ping_atom = caf::atom_constant<caf::atom("hping")>;

/// Long enough for any of these tests on a loaded machine; a lost wake-up
/// shows as this timeout rather than as a hung test.
constexpr auto bound = std::chrono::seconds{60};

struct handoff_config : caf::actor_system_config {
  explicit handoff_config(std::size_t threads) {
    load<tasksup::handoff_coordinator>();
    set("scheduler.max-threads", threads);
  }
};

/// One member of a ring: passes the token on until `hops` are left.
caf::behavior ring_member(caf::event_based_actor* self, caf::actor* next,
                          caf::actor report) {
  return {
    [=](hop_atom, int left) {
      if (left == 0)
        self->send(report, done_atom::value);
      else
        self->send(*next, hop_atom::value, left - 1);
    },
  };
}

/// Counts pings and answers the `total`-th one.
caf::behavior counter(caf::event_based_actor* self, int total,
                      caf::actor report) {
  auto seen = std::make_shared<int>(0);
  return {
    [=](ping_atom) {
      if (++*seen == total)
        self->send(report, done_atom::value, *seen);
    },
  };
}

} // namespace

TEST_CASE("a message chain around a ring of actors completes on the "
          "handoff scheduler, with one worker thread and with several") {
  for (std::size_t threads : {std::size_t{1}, std::size_t{4}}) {
    handoff_config cfg{threads};
    caf::actor_system sys{cfg};
    caf::scoped_actor self{sys};
    constexpr int ring_size = 16;
    constexpr int hops = 20'000;
    std::vector<caf::actor> ring(ring_size);
    for (int i = 0; i < ring_size; ++i)
      ring[i] =
        sys.spawn(ring_member, &ring[(i + 1) % ring_size], caf::actor{self});
    self->send(ring[0], hop_atom::value, hops);
    bool done = false;
    self->receive([&](done_atom) { done = true; }, caf::after(bound) >> [] {});
    CHECK(done);
    for (auto& a : ring)
      self->send_exit(a, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("an actor that makes a thousand actors ready in one turn gets "
          "every answer") {
  handoff_config cfg{4};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  constexpr int fan_out = 1000;
  auto count = sys.spawn(counter, fan_out, caf::actor{self});
  auto relay = [](caf::event_based_actor* me, caf::actor to) -> caf::behavior {
    return {[=](ping_atom) { me->send(to, ping_atom::value); }};
  };
  auto source = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {[=](hop_atom, int) {
      // All made ready in this one turn: three kept, the rest announced.
      for (int i = 0; i < fan_out; ++i)
        me->send(me->spawn(relay, count), ping_atom::value);
    }};
  });
  self->send(source, hop_atom::value, 0);
  int seen = 0;
  self->receive([&](done_atom, int n) { seen = n; },
                caf::after(bound) >> [] {});
  CHECK(seen == fan_out);
}

TEST_CASE("sends from threads outside the scheduler wake its workers") {
  handoff_config cfg{2};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  constexpr int senders = 4;
  constexpr int each = 2000;
  auto count = sys.spawn(counter, senders * each, caf::actor{self});
  std::vector<std::thread> threads;
  for (int t = 0; t < senders; ++t)
    threads.emplace_back([count] {
      for (int i = 0; i < each; ++i)
        caf::anon_send(count, ping_atom::value);
    });
  for (auto& t : threads)
    t.join();
  int seen = 0;
  self->receive([&](done_atom, int n) { seen = n; },
                caf::after(bound) >> [] {});
  CHECK(seen == senders * each);
}

TEST_CASE("an actor kept for a thread whose next turn blocks is run by "
          "another thread") {
  // The first turn makes two actors ready, both kept for its thread. That
  // thread then runs the first, which blocks until the second has run: only
  // another worker can run it.
  handoff_config cfg{2};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto ran = std::make_shared<std::promise<void>>();
  auto report = caf::actor{self};
  auto waiter = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {[=](ping_atom) {
      auto ok = ran->get_future().wait_for(bound) == std::future_status::ready;
      me->send(report, done_atom::value, ok ? 1 : 0);
    }};
  });
  auto second = sys.spawn([=](caf::event_based_actor*) -> caf::behavior {
    return {[=](ping_atom) { ran->set_value(); }};
  });
  auto first = sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {[=](hop_atom, int) {
      me->send(waiter, ping_atom::value);
      me->send(second, ping_atom::value);
    }};
  });
  self->send(first, hop_atom::value, 0);
  int ok = -1;
  self->receive([&](done_atom, int n) { ok = n; },
                caf::after(bound + bound) >> [] {});
  CHECK(ok == 1);
}

/// Runs `work` on an actor system of two handoff threads, made and torn
/// down on a thread of its own (so that a shutdown that hangs fails the test
/// instead of hanging it); returns whether it was torn down within `bound`.
bool shuts_down(std::function<void(caf::actor_system&)> work) {
  auto shut = std::make_shared<std::promise<void>>();
  auto shut_down = shut->get_future();
  std::thread t{[shut, work = std::move(work)] {
    {
      handoff_config cfg{2};
      caf::actor_system sys{cfg};
      work(sys);
    }
    shut->set_value();
  }};
  auto ended = shut_down.wait_for(bound) == std::future_status::ready;
  if (ended)
    t.join();
  else
    t.detach();
  return ended;
}

TEST_CASE("an actor system on the handoff scheduler shuts down with "
          "messages still queued") {
  REQUIRE(shuts_down([](caf::actor_system& sys) {
    auto busy = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
      return {[](ping_atom) {}};
    });
    for (int i = 0; i < 10'000; ++i)
      caf::anon_send(busy, ping_atom::value);
    caf::anon_send_exit(busy, caf::exit_reason::user_shutdown);
  }));
}

/// What the members of endless rings share.
struct endless {
  /// Set: the token stops where it is.
  std::atomic<bool> stop{false};
  /// Hops made, by all rings.
  std::atomic<long> hops{0};
};

/// A member of a ring whose handles it shares: passes the token on until
/// told to stop.
caf::behavior endless_member(caf::event_based_actor* self,
                             std::shared_ptr<std::vector<caf::actor>> ring,
                             std::size_t index,
                             std::shared_ptr<endless> shared) {
  return {
    [=](hop_atom, int n) {
      shared->hops.fetch_add(1);
      if (!shared->stop.load())
        self->send((*ring)[(index + 1) % ring->size()], hop_atom::value, n + 1);
    },
  };
}

/// Spawns `count` rings of `size` endless members; starts each with a token.
std::vector<caf::actor> endless_rings(caf::actor_system& sys, int count,
                                      int size, std::shared_ptr<endless> stop) {
  std::vector<caf::actor> all;
  for (int r = 0; r < count; ++r) {
    auto ring = std::make_shared<std::vector<caf::actor>>();
    for (int i = 0; i < size; ++i)
      ring->push_back(
        sys.spawn(endless_member, ring, static_cast<std::size_t>(i), stop));
    caf::anon_send(ring->front(), hop_atom::value, 0);
    all.insert(all.end(), ring->begin(), ring->end());
  }
  return all;
}

TEST_CASE("a message chain that never ends does not starve the queue on "
          "the handoff scheduler") {
  // One worker thread: two actors pass a token back and forth forever, each
  // turn making the other ready for the thread's own slot. A request from
  // outside waits in the shared queue and is answered all the same.
  handoff_config cfg{1};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto rings = std::make_shared<endless>();
  auto pair = endless_rings(sys, 1, 2, rings);
  auto echo = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](ping_atom) { return done_atom::value; }};
  });
  bool answered = false;
  self->request(echo, bound, ping_atom::value)
    .receive([&](done_atom) { answered = true; }, [](caf::error&) {});
  rings->stop.store(true);
  CHECK(answered);
  for (auto& a : pair)
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("an actor system on the handoff scheduler shuts down while "
          "chains run") {
  // Each ring member's turn makes the next ready for its thread's slot; the
  // workers end with actors in their slots, which must still be released.
  REQUIRE(shuts_down([](caf::actor_system& sys) {
    auto rings = std::make_shared<endless>();
    auto members = endless_rings(sys, 4, 8, rings);
    // Running: the tokens have gone round many times.
    auto until = std::chrono::steady_clock::now() + bound;
    while (rings->hops.load() < 100'000 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    for (auto& m : members)
      caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
  }));
}

// A worker node's agent on simulated time: it never takes a placement from
// a leadership epoch older than one it has seen (a deposed leader of a
// shared journal cannot start attempts), and it keeps the attempts of a
// coordinator it lost for its adoption grace, for the next one to adopt.
// That it takes placements from the coordinator it joined only needs real
// node ids: the cluster tests.

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

remote_attempt placement(std::int64_t epoch, std::string runtime) {
  remote_attempt ra;
  ra.attempt.spec.task_id = "t";
  ra.attempt.spec.attempt = 1;
  ra.runtime = std::move(runtime);
  ra.epoch = epoch;
  return ra;
}

std::string
refusal(const std::optional<caf::expected<container_worker_actor>>& answer) {
  REQUIRE(answer);
  REQUIRE_FALSE(*answer);
  return error_text(answer->error());
}

/// An attempt's owner on a coordinator: records its worker's reports, and
/// tells a worker to go on (`resume`) when the test says so.
struct owner_log {
  std::vector<attempt_report> reports;
  std::vector<event> events;
};

caf::actor spawn_owner(fixture& fx, std::shared_ptr<owner_log> log) {
  return fx.keep(fx.sys().spawn([log]() -> caf::behavior {
    return {
      [log](attempt_exited_atom, const attempt_report& r) {
        log->reports.push_back(r);
      },
      [log](event_atom, const event& ev) { log->events.push_back(ev); },
      [](start_atom, int, const std::string&) {},
    };
  }));
}

/// A worker node with the scripted runtime, `grace_s` of adoption grace,
/// joined to "its coordinator" (this very node).
struct adoption_fixture {
  fixture fx;
  node_agent_actor agent;
  std::string root;

  explicit adoption_fixture(double grace_s) {
    root = (std::filesystem::temp_directory_path() /
            ("tasksup-adopt-" + std::to_string(::getpid())))
             .string();
    node_agent_options opts;
    opts.name = "w1";
    opts.runtimes["scripted"] = fx.runtime;
    opts.attempt_root = root;
    opts.adopt_grace = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(grace_s));
    agent = fx.keep(spawn_node_agent(fx.sys(), opts));
    join();
  }

  ~adoption_fixture() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }

  /// The node process joined a coordinator (again).
  void join() {
    auto node = fx.sys().node();
    fx.sys().spawn([a = agent, node](caf::event_based_actor* self) {
      self->send(a, join_atom::value, node);
    });
    fx.run();
  }

  /// Places attempt 1 of task `t` (agent `a`) for `owner`.
  container_worker_actor place(const caf::actor& owner) {
    auto ra = placement(1, "scripted");
    ra.attempt.spec.agent_id = "a";
    auto w = fx.ask<container_worker_actor>(
      agent, run_attempt_atom::value, ra,
      caf::actor_cast<attempt_owner_actor>(owner));
    REQUIRE(w);
    REQUIRE(*w);
    return **w;
  }

  /// `owner`'s coordinator is gone: its connection failed.
  void lose(const caf::actor& owner) {
    caf::anon_send_exit(owner, caf::exit_reason::remote_link_unreachable);
    fx.run();
  }

  std::optional<caf::expected<container_worker_actor>>
  adopt(const caf::actor& owner, std::int64_t epoch = 2) {
    return fx.ask<container_worker_actor>(
      agent, adopt_atom::value, std::string{"t"}, 1, epoch,
      caf::actor_cast<attempt_owner_actor>(owner));
  }

  /// `owner` has `w` go on, as a supervisor does once it has its handle.
  void resume(const caf::actor& owner, const container_worker_actor& w) {
    caf::send_as(owner, w, resume_atom::value);
    fx.run();
  }

  /// Places an attempt that runs until killed, and loses the coordinator
  /// that placed it.
  void place_and_lose() {
    fx.runtime->script("a", {hangs()});
    auto owner = spawn_owner(fx, std::make_shared<owner_log>());
    place(owner);
    lose(owner);
  }

  std::size_t kills() const {
    std::size_t n = 0;
    for (auto& c : fx.runtime->calls())
      n += c.what == runtime::scripted_call::kind::kill;
    return n;
  }
};

} // namespace

TEST_CASE("node agent: an attempt outlives its lost coordinator for the "
          "grace, and the next one adopts it and gets its report") {
  adoption_fixture a{30};
  a.fx.runtime->script("a", {exits(0, {}, 20)});
  auto old_log = std::make_shared<owner_log>();
  auto old_owner = spawn_owner(a.fx, old_log);
  auto w = a.place(old_owner);
  a.lose(old_owner);
  a.fx.advance(5);
  // Still running, though nobody owns it.
  CHECK(a.fx.runtime->running() == 1);
  CHECK(a.kills() == 0);
  // The node joins the coordinator that took over; a rebuilt supervisor
  // adopts the attempt.
  a.join();
  auto log = std::make_shared<owner_log>();
  auto owner = spawn_owner(a.fx, log);
  auto adopted = a.adopt(owner);
  REQUIRE(adopted);
  REQUIRE(*adopted);
  CHECK(**adopted == w);
  a.resume(owner, w);
  a.fx.advance(30); // past the grace too: adopted, it is not killed
  REQUIRE(log->reports.size() == 1);
  CHECK(log->reports[0].attempt == 1);
  CHECK(log->reports[0].outcome.exit_code == 0);
  CHECK(log->reports[0].outcome.lost_node.empty());
  CHECK(old_log->reports.empty());
  CHECK(a.kills() == 0);
  CHECK(a.fx.runtime->started() == 1);
}

TEST_CASE("node agent: the report of an attempt that ended while nobody "
          "owned it is held for the adopter") {
  adoption_fixture a{30};
  a.fx.runtime->script("a", {exits(3, {}, 2)});
  auto old_owner = spawn_owner(a.fx, std::make_shared<owner_log>());
  auto w = a.place(old_owner);
  a.lose(old_owner);
  a.fx.advance(5); // it exits, unowned
  CHECK(a.fx.runtime->running() == 0);
  a.join();
  auto log = std::make_shared<owner_log>();
  auto owner = spawn_owner(a.fx, log);
  auto adopted = a.adopt(owner);
  REQUIRE(adopted);
  REQUIRE(*adopted);
  CHECK(log->reports.empty()); // not before the owner has it go on
  a.resume(owner, w);
  REQUIRE(log->reports.size() == 1);
  CHECK(log->reports[0].outcome.exit_code == 3);
}

TEST_CASE("node agent: a report its coordinator had not recorded when it "
          "went is given again to the one that adopts the attempt, and "
          "a recorded one is let go") {
  adoption_fixture a{30};
  a.fx.runtime->script("a", {exits(0, {}, 1)});
  auto old_log = std::make_shared<owner_log>();
  auto old_owner = spawn_owner(a.fx, old_log);
  auto w = a.place(old_owner);
  a.fx.advance(2);
  REQUIRE(old_log->reports.size() == 1);
  // The coordinator goes before it recorded the end (no release).
  a.lose(old_owner);
  a.join();
  auto log = std::make_shared<owner_log>();
  auto owner = spawn_owner(a.fx, log);
  auto adopted = a.adopt(owner);
  REQUIRE(adopted);
  REQUIRE(*adopted);
  a.resume(owner, w);
  REQUIRE(log->reports.size() == 1);
  CHECK(log->reports[0].outcome.exit_code == 0);
  CHECK(a.fx.runtime->started() == 1);
  // Recorded this time: released, the worker ends, and nothing is left
  // to adopt.
  caf::send_as(owner, w, release_atom::value);
  a.fx.run();
  a.join();
  auto none = a.adopt(spawn_owner(a.fx, std::make_shared<owner_log>()), 3);
  REQUIRE(none);
  CHECK_FALSE(*none);
}

TEST_CASE("node agent: a kept attempt nobody adopts is killed when the grace "
          "runs out, or at once when the new coordinator says it adopted "
          "all it will") {
  SECTION("the grace runs out") {
    adoption_fixture a{30};
    a.place_and_lose();
    a.fx.advance(29);
    CHECK(a.kills() == 0);
    a.fx.advance(2);
    CHECK(a.kills() == 1);
    CHECK(a.fx.runtime->running() == 0);
    // Too late to adopt.
    a.join();
    auto late = a.adopt(spawn_owner(a.fx, std::make_shared<owner_log>()));
    REQUIRE(late);
    REQUIRE_FALSE(*late);
    CHECK(late->error().code() ==
          static_cast<std::uint8_t>(protocol_error::unknown_task));
    CHECK_THAT(error_text(late->error()),
               Catch::Contains("kept no attempt 1 of task 't'"));
  }
  SECTION("the coordinator it joins adopted all it will") {
    adoption_fixture a{30};
    a.place_and_lose();
    a.fx.advance(1);
    a.join();
    auto agent = a.agent;
    a.fx.sys().spawn([agent](caf::event_based_actor* self) {
      self->send(agent, adopt_end_atom::value);
    });
    a.fx.run();
    CHECK(a.kills() == 1);
    CHECK(a.fx.runtime->running() == 0);
  }
  SECTION("without a grace the attempt dies with the connection") {
    adoption_fixture a{0};
    a.place_and_lose();
    CHECK(a.kills() == 1);
  }
}

TEST_CASE("node agent: an adoption from an older leadership epoch is "
          "refused, and an attempt placed by the current coordinator is not "
          "adopted") {
  adoption_fixture a{30};
  a.fx.runtime->script("a", {hangs()});
  auto old_owner = spawn_owner(a.fx, std::make_shared<owner_log>());
  a.place(old_owner); // epoch 1
  // Placed on this connection and still owned: nothing to adopt.
  auto owned = a.adopt(spawn_owner(a.fx, std::make_shared<owner_log>()), 1);
  REQUIRE(owned);
  REQUIRE_FALSE(*owned);
  CHECK_THAT(error_text(owned->error()), Catch::Contains("kept no attempt"));
  a.lose(old_owner);
  a.join();
  auto older = a.adopt(spawn_owner(a.fx, std::make_shared<owner_log>()), 0);
  REQUIRE(older);
  REQUIRE_FALSE(*older);
  CHECK(older->error().code() ==
        static_cast<std::uint8_t>(protocol_error::not_leader));
  auto adopted = a.adopt(spawn_owner(a.fx, std::make_shared<owner_log>()), 3);
  REQUIRE(adopted);
  CHECK(*adopted);
}

TEST_CASE("node agent: a placement from an older leadership epoch than one "
          "it has seen is refused, the same or a newer one is taken") {
  fixture fx;
  node_agent_options opts;
  opts.name = "w1";
  auto agent = fx.keep(spawn_node_agent(fx.sys(), opts));
  auto owner = caf::actor_cast<attempt_owner_actor>(
    fx.collector(std::make_shared<collected>()));
  // The node process says whom it joined (here: this very node).
  auto node = fx.sys().node();
  fx.sys().spawn([agent, node](caf::event_based_actor* self) {
    self->send(agent, join_atom::value, node);
  });
  fx.run();
  // Epoch 5 is seen (the runtime it asks for is not here: refused for that).
  auto newer = fx.ask<container_worker_actor>(agent, run_attempt_atom::value,
                                              placement(5, "none"), owner);
  CHECK_THAT(refusal(newer), Catch::Contains("no none runtime here"));
  // A deposed leader at epoch 4 places an attempt: refused for its epoch.
  auto older = fx.ask<container_worker_actor>(agent, run_attempt_atom::value,
                                              placement(4, "none"), owner);
  REQUIRE(older);
  REQUIRE_FALSE(*older);
  CHECK(older->error().code() ==
        static_cast<std::uint8_t>(protocol_error::not_leader));
  CHECK_THAT(refusal(older), Catch::Contains("epoch 4, older than epoch 5"));
  // The leader of epoch 5, or a newer one, still places here.
  auto same = fx.ask<container_worker_actor>(agent, run_attempt_atom::value,
                                             placement(5, "none"), owner);
  CHECK_THAT(refusal(same), Catch::Contains("no none runtime here"));
  auto newest = fx.ask<container_worker_actor>(agent, run_attempt_atom::value,
                                               placement(6, "none"), owner);
  CHECK_THAT(refusal(newest), Catch::Contains("no none runtime here"));
}

// A worker node's agent on simulated time: it never takes a placement from
// a leadership epoch older than one it has seen (a deposed leader of a
// shared journal cannot start attempts). That it takes placements from the
// coordinator it joined only needs real node ids: the cluster tests.

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/event_based_actor.hpp>

#include <string>

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

} // namespace

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

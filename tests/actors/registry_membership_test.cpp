// The registry's node membership, on simulated time: which worker nodes
// joined, who may drop one, and what `nodes` lists.

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/typed_event_based_actor.hpp>

#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// A worker node's agent that runs nothing: enough to join.
node_agent_actor::behavior_type idle_agent(node_agent_actor::pointer) {
  return {
    [](join_atom, const caf::node_id&) {},
    [](logs_atom, const std::string&, int, std::uint64_t,
       bool) -> caf::result<int, std::uint64_t, std::string, bool> {
      return caf::make_error(caf::sec::unexpected_message, "no logs here");
    },
    [](node_left_atom, const std::string&) {},
    [](run_attempt_atom, const remote_attempt&,
       const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      return caf::make_error(caf::sec::unexpected_message, "idle agent");
    },
    [](adopt_atom, const std::string&, int, std::int64_t,
       const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      return caf::make_error(caf::sec::unexpected_message, "nothing kept");
    },
    [](adopt_end_atom) {},
    [](stop_atom) { return true; },
    [](status_atom) { return 0; },
  };
}

/// An agent that never answers `status`: a node that froze, or whose
/// connection is gone without a word. It keeps the promises it owes, and
/// what it is told when dropped.
node_agent_actor::behavior_type
silent_agent(node_agent_actor::pointer self,
             std::shared_ptr<std::vector<std::string>> told) {
  auto owed = std::make_shared<std::vector<caf::typed_response_promise<int>>>();
  return {
    [](join_atom, const caf::node_id&) {},
    [](logs_atom, const std::string&, int, std::uint64_t,
       bool) -> caf::result<int, std::uint64_t, std::string, bool> {
      return caf::make_error(caf::sec::unexpected_message, "no logs here");
    },
    [told](node_left_atom, const std::string& why) { told->push_back(why); },
    [](run_attempt_atom, const remote_attempt&,
       const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      return caf::make_error(caf::sec::unexpected_message, "silent agent");
    },
    [](adopt_atom, const std::string&, int, std::int64_t,
       const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      return caf::make_error(caf::sec::unexpected_message, "nothing kept");
    },
    [](adopt_end_atom) {},
    [](stop_atom) { return true; },
    [self, owed](status_atom) -> caf::result<int> {
      owed->push_back(self->make_response_promise<int>());
      return owed->back();
    },
  };
}

/// An agent whose node never answers a start: its requests keep waiting.
node_agent_actor::behavior_type hung_agent(node_agent_actor::pointer self) {
  auto owed = std::make_shared<
    std::vector<caf::typed_response_promise<container_worker_actor>>>();
  return {
    [](join_atom, const caf::node_id&) {},
    [](logs_atom, const std::string&, int, std::uint64_t,
       bool) -> caf::result<int, std::uint64_t, std::string, bool> {
      return caf::make_error(caf::sec::unexpected_message, "no logs here");
    },
    [](node_left_atom, const std::string&) {},
    [self,
     owed](run_attempt_atom, const remote_attempt&,
           const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      owed->push_back(self->make_response_promise<container_worker_actor>());
      return owed->back();
    },
    [](adopt_atom, const std::string&, int, std::int64_t,
       const attempt_owner_actor&) -> caf::result<container_worker_actor> {
      return caf::make_error(caf::sec::unexpected_message, "nothing kept");
    },
    [](adopt_end_atom) {},
    [](stop_atom) { return true; },
    [](status_atom) { return 0; },
  };
}

struct membership_fixture : fixture {
  registry_actor reg;

  membership_fixture() {
    registry_options opts;
    opts.config = builtin_config();
    opts.runtimes["*"] = runtime;
    opts.node_name = "coord-1";
    opts.peer_timeout_s = 10;
    opts.attempt_root = "/tmp/tasksup-actor-tests";
    reg = keep(spawn_registry(sys(), std::move(opts)));
    run();
  }

  node_agent_actor agent() { return keep(sys().spawn(idle_agent)); }

  static node_offer offer(std::string name, int max_concurrent) {
    node_offer o;
    o.name = std::move(name);
    o.max_concurrent = max_concurrent;
    o.runtimes = {"process"};
    return o;
  }

  caf::expected<std::string> join(node_offer o, node_agent_actor a) {
    auto answer = ask<std::string>(reg, join_atom::value, std::move(o), a);
    REQUIRE(answer);
    return *answer;
  }

  std::vector<node_info> nodes() {
    auto answer = ask<std::vector<node_info>>(reg, nodes_atom::value);
    REQUIRE(answer);
    REQUIRE(*answer);
    return **answer;
  }
};

} // namespace

TEST_CASE_METHOD(membership_fixture,
                 "a worker node that joins is listed, joining again under "
                 "its name replaces it, its agent's end drops it",
                 "[registry][membership]") {
  auto first = agent();
  auto name = join(offer("w1", 2), first);
  REQUIRE(name);
  CHECK(*name == "coord-1");
  auto listed = nodes();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].offer.name == "w1");
  CHECK(listed[0].offer.max_concurrent == 2);
  CHECK(listed[0].running == 0);

  // The same node again (it reconnected before its loss was seen): its new
  // offer replaces the old one.
  REQUIRE(join(offer("w1", 3), first));
  listed = nodes();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].offer.max_concurrent == 3);

  // Its agent's end drops it.
  caf::anon_send_exit(first, caf::exit_reason::user_shutdown);
  run();
  CHECK(nodes().empty());

  // It can join again after its loss.
  REQUIRE(join(offer("w1", 1), agent()));
  CHECK(nodes().size() == 1);
}

TEST_CASE_METHOD(membership_fixture,
                 "a join out of bounds or with a lease the peer timeout "
                 "overtakes is refused with the reason, and only the "
                 "registry's own supervisors can report a node lost",
                 "[registry][membership]") {
  auto refused = join(offer("w1", 0), agent());
  REQUIRE_FALSE(refused);
  CHECK(refused.error().category() == protocol_error_category);
  CHECK(refused.error().code() ==
        static_cast<std::uint8_t>(protocol_error::invalid_task));
  CHECK(error_text(refused.error()).find("max_concurrent") !=
        std::string::npos);
  CHECK_FALSE(join(offer("", 1), agent()));
  // A lease the coordinator's peer timeout (10 s) would overtake.
  auto slow = offer("leased", 1);
  slow.lease_s = 10;
  auto late = join(slow, agent());
  REQUIRE_FALSE(late);
  CHECK(error_text(late.error()).find("--peer-timeout (10 s)") !=
        std::string::npos);
  CHECK(nodes().empty());
  slow.lease_s = 9.5;
  REQUIRE(join(slow, agent()));
  REQUIRE(nodes().size() == 1);
  CHECK(nodes()[0].offer.lease_s == 9.5);

  CHECK_FALSE(join(offer("w1", 1), node_agent_actor{}));

  REQUIRE(join(offer("w1", 1), agent()));
  REQUIRE(nodes().size() == 2);
  // Anyone else's report is ignored: the node stays.
  auto stranger = sys().spawn([](caf::event_based_actor*) {});
  caf::send_as(stranger, caf::actor_cast<caf::actor>(reg),
               node_lost_atom::value, std::string{"w1"}, sys().node());
  run();
  CHECK(nodes().size() == 2);
}

TEST_CASE_METHOD(membership_fixture,
                 "another node claiming a joined node's name is refused while "
                 "that node answers, and takes the name when it does not",
                 "[registry][membership]") {
  auto alive = agent();
  REQUIRE(join(offer("w1", 1), alive));
  auto refused = join(offer("w1", 2), agent());
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() ==
        static_cast<std::uint8_t>(protocol_error::duplicate_task));
  CHECK(error_text(refused.error()).find("answers") != std::string::npos);
  REQUIRE(nodes().size() == 1);
  CHECK(nodes()[0].offer.max_concurrent == 1);

  // A worker restarted while its old connection still looks open.
  auto told = std::make_shared<std::vector<std::string>>();
  auto frozen = keep(sys().spawn(silent_agent, told));
  REQUIRE(join(offer("w2", 1), frozen));
  auto restarted = agent();
  auto answer =
    ask_later<std::string>(reg, join_atom::value, offer("w2", 4), restarted);
  run();
  CHECK_FALSE(answer->has_value());
  // Meanwhile a third claimant is refused at once.
  auto third = join(offer("w2", 5), agent());
  REQUIRE_FALSE(third);
  CHECK(error_text(third.error()).find("is joining already") !=
        std::string::npos);
  advance(1);
  CHECK_FALSE(answer->has_value());
  advance(1.5);
  REQUIRE(answer->has_value());
  REQUIRE(**answer);
  CHECK(***answer == "coord-1");
  auto listed = nodes();
  REQUIRE(listed.size() == 2);
  CHECK(listed[1].offer.name == "w2");
  CHECK(listed[1].offer.max_concurrent == 4);
  // The dropped node is told, should its connection still hold: it ends
  // its attempts and joins again rather than idle unused.
  REQUIRE(told->size() == 1);
  CHECK(told->front().find("did not answer") != std::string::npos);
  // The frozen agent's end is no longer the node's.
  caf::anon_send_exit(frozen, caf::exit_reason::user_shutdown);
  run();
  CHECK(nodes().size() == 2);
}

TEST_CASE_METHOD(membership_fixture,
                 "a node whose start timed out takes no more attempts: the "
                 "retry that follows at once goes elsewhere",
                 "[registry][membership]") {
  REQUIRE(join(offer("slow", 1), keep(sys().spawn(hung_agent))));
  runtime->script("a", {exits(0)});
  auto id = ask<std::string>(reg, submit_atom::value, task_with("t1", {"a"}));
  REQUIRE(id);
  REQUIRE(*id);
  run();
  // Placed on the node, whose start never comes.
  CHECK(runtime->calls().empty());
  advance(11);
  // The supervisor's report that the node is lost and its next permit
  // request reach the registry together: the retry runs here, where the
  // coordinator runs attempts once it has no worker node left.
  auto r = ask<task_result>(reg, await_atom::value, std::string{"t1"});
  REQUIRE(r);
  REQUIRE(*r);
  CHECK((*r)->outcome == task_outcome::succeeded);
  CHECK((*r)->metadata.total_attempts == 2);
  REQUIRE(runtime->calls().size() >= 1);
  CHECK(nodes().empty());
}

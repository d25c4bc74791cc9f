// The registry as the host of groups, on simulated time: a group document's
// tree runs its task members as the registry's tasks; a restart reruns a
// member under its id with its attempts numbered on; the group answers
// `status` (its tree), `await`, `stop` (of itself or of a nested group) and
// publishes its own events; its ids are the tree's while it runs.

#include "tasksup/actors/registry_actor.hpp"

#include "../temp_dir.hpp"
#include "registry_fixture.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct group_fixture : registry_fixture {
  /// A rerun numbers its attempts on from the attempt directories too:
  /// each test has its own.
  temp_dir attempts{"groups"};

  void start() {
    auto cfg = builtin_config();
    // Every failure here is the group's to judge: no agent's breaker opens.
    cfg.node.breaker.max_failures = 1000;
    registry_fixture::start(std::move(cfg), 11, attempts.path);
  }

  caf::expected<std::string> submit_json(const std::string& text) {
    auto id = ask<std::string>(reg, submit_json_atom::value, text, false);
    REQUIRE(id);
    return std::move(*id);
  }

  /// "id phase restarts" per row of `id`'s tree, indented by depth.
  std::vector<std::string> tree(const std::string& id) {
    std::vector<std::string> out;
    for (auto& r : status(id).tree)
      out.push_back(std::string(2 * static_cast<std::size_t>(r.depth), ' ') +
                    r.id + " " + std::string{to_string(r.phase)} + " " +
                    std::to_string(r.restarts));
    return out;
  }

  /// The `group` events of `id`, as "change member how".
  std::vector<std::string> changes(const std::string& id) {
    std::vector<std::string> out;
    for (auto& ev : seen->of(event_kind::group, id)) {
      auto& d = std::get<event_data::group>(ev.fields()->data);
      out.push_back(d.change + " " + d.member + " " + d.how);
    }
    return out;
  }

  /// Attempt numbers started for `task_id`, in order.
  std::vector<int> attempts_of(const std::string& task_id) {
    std::vector<int> out;
    for (auto& c : runtime->calls())
      if (c.what == runtime::scripted_call::kind::start && c.task_id == task_id)
        out.push_back(c.attempt);
    return out;
  }
};

/// A task member running agent `agent`, failing for good on its first
/// failure (no retries): its group sees every failure.
std::string member(const std::string& id, const std::string& agent,
                   const std::string& extra = {}) {
  return R"({"id": ")" + id +
         R"(", "prompt": "p", "agent_selection": {"agents": [{"agent_id": ")" +
         agent + R"(", "agent_cli": ")" + agent +
         R"(-cli"}]}, "supervisor": {"max_retries_per_agent": 0)" + extra +
         "}}";
}

} // namespace

TEST_CASE_METHOD(group_fixture,
                 "one_for_all: a member's failure stops the others and reruns "
                 "every member under its id, attempts numbered on",
                 "[registry][group]") {
  start();
  runtime->script("keep", {hangs()});
  runtime->script("flaky", {exits(1, {}, 1), exits(0, {}, 1)});
  auto id = submit_json(R"({"group": {"id": "team", "strategy": "one_for_all",
    "members": [)" + member("k", "keep") +
                        "," + member("f", "flaky") + "]}}");
  REQUIRE(id);
  CHECK(*id == "team");
  run();
  CHECK(tree("team") == std::vector<std::string>{
                          "team running 0", "  k running 0", "  f running 0"});
  advance(1);
  // f failed: k was stopped, then both ran again.
  CHECK(attempts_of("k") == std::vector<int>{1, 2});
  CHECK(attempts_of("f") == std::vector<int>{1, 2});
  CHECK(tree("team") == std::vector<std::string>{
                          "team running 1", "  k running 1", "  f running 1"});
  CHECK(changes("team") ==
        std::vector<std::string>{"member_started k ", "member_started f ",
                                 "started  ", "member_ended f failed",
                                 "restart f failed", "member_ended k stopped",
                                 "member_started k ", "member_started f "});
  // The members' histories go on: k's first run ended stopped, its second
  // runs; f's first run failed.
  auto k_done = seen->of(event_kind::task_done, "k");
  REQUIRE(k_done.size() == 1);
  CHECK(std::get<event_data::task_done>(k_done[0].fields()->data)
          .result()
          .outcome == task_outcome::stopped);
  CHECK(status("k").attempt == 2);
  // f succeeds; k (transient, running) is stopped by the user's stop of the
  // group, which ends the group `stopped`.
  advance(1);
  CHECK(status("f").state == task_state::done);
  auto stopped =
    ask<bool>(reg, stop_atom::value, std::string{"team"}, stop_mode::cancel);
  REQUIRE(stopped);
  CHECK(*stopped == true);
  advance(30);
  auto r = await("team");
  CHECK(r.outcome == task_outcome::stopped);
  CHECK(r.cause.reason == end_reason::user_stop);
  CHECK(status("team").state == task_state::done);
  // Ended: its tree is what its members' records say.
  CHECK(tree("team") ==
        std::vector<std::string>{"team ended 1", "  k ended 0", "  f ended 0"});
  CHECK(status("team").tree[1].last == member_end::stopped);
  CHECK(status("team").tree[2].last == member_end::normal);
}

TEST_CASE_METHOD(group_fixture,
                 "a member that keeps failing exhausts the group's intensity: "
                 "the group fails and says why",
                 "[registry][group]") {
  start();
  runtime->script("bad", {exits(1, {}, 1)});
  REQUIRE(submit_json(R"({"group": {"id": "g", "intensity":
    {"max_restarts": 2, "period_s": 60}, "members": [)" +
                      member("x", "bad") + "]}}"));
  // Each run fails a second after it starts: one step of the clock each.
  for (int i = 0; i < 10; ++i)
    advance(1);
  auto r = await("g");
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.cause.reason == end_reason::policy_failed);
  REQUIRE(r.error);
  CHECK_THAT(*r.error, Catch::Contains("intensity"));
  CHECK_THAT(*r.error, Catch::Contains("'x'"));
  // Its first run and two restarts; the third restart was one too many.
  CHECK(attempts_of("x") == std::vector<int>{1, 2, 3});
  auto ends = changes("g");
  REQUIRE(!ends.empty());
  CHECK(ends.back() == "ended x intensity");
}

TEST_CASE_METHOD(group_fixture,
                 "a nested group answers status with its subtree and stops "
                 "alone, and the group above does not restart what was stopped",
                 "[registry][group]") {
  start();
  runtime->script("hold", {hangs()});
  REQUIRE(submit_json(R"({"group": {"id": "top", "members": [)" +
                      member("a", "hold") +
                      R"(, {"group": {"id": "inner", "members": [)" +
                      member("b", "hold") + "]}}]}}"));
  run();
  CHECK(tree("top") ==
        std::vector<std::string>{"top running 0", "  a running 0",
                                 "  inner running 0", "    b running 0"});
  CHECK(tree("inner") ==
        std::vector<std::string>{"inner running 0", "  b running 0"});
  // Its ids are the tree's while it runs.
  auto taken =
    ask<std::string>(reg, submit_json_atom::value, member("b", "hold"), false);
  REQUIRE(taken);
  REQUIRE(!*taken);
  CHECK_THAT(error_text(taken->error()),
             Catch::Contains("belongs to the running group 'top'"));
  // Controls other than stop are the tasks'.
  auto paused = ask<bool>(reg, pause_atom::value, std::string{"inner"});
  REQUIRE(paused);
  REQUIRE(!*paused);
  CHECK_THAT(error_text(paused->error()), Catch::Contains("is a group"));
  auto stopped =
    ask<bool>(reg, stop_atom::value, std::string{"inner"}, stop_mode::kill);
  REQUIRE(stopped);
  CHECK(*stopped == true);
  advance(1);
  CHECK(await("inner").outcome == task_outcome::stopped);
  CHECK(status("b").state == task_state::done);
  CHECK(status("a").state != task_state::done);
  CHECK(attempts_of("b") == std::vector<int>{1});
  CHECK(tree("top")[2] == "  inner ended 0");
  auto killed =
    ask<bool>(reg, stop_atom::value, std::string{"top"}, stop_mode::kill);
  REQUIRE(killed);
  advance(1);
  CHECK(await("top").outcome == task_outcome::stopped);
  // Ended, the ids are free again for a `--replace` of the group.
  auto again =
    ask<std::string>(reg, submit_json_atom::value,
                     std::string{R"({"group": {"id": "top", "members": [)"} +
                       member("a", "hold") + "]}}",
                     true);
  REQUIRE(again);
  REQUIRE(*again);
  CHECK(**again == "top");
  // A replaced tree starts afresh, its tasks' attempts from 1 (a rerun
  // within a group numbers on instead).
  run();
  CHECK(attempts_of("a") == std::vector<int>{1, 1});
}

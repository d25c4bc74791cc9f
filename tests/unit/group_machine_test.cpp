// The group machine's decisions (OTP's supervisor behaviour), driven as a
// carrier would: each start or stop it hands out is carried out, and the
// order of those operations is what the tests read.

#include "tasksup/supervisor/group_machine.hpp"

#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

using namespace tasksup;

namespace {

group_member_shape member(std::string id,
                          restart_type restart = restart_type::permanent,
                          bool significant = false) {
  return {std::move(id), restart, significant};
}

group_shape shape(group_strategy strategy,
                  std::initializer_list<group_member_shape> members,
                  group_intensity intensity = {3, 60},
                  auto_shutdown shutdown = auto_shutdown::never) {
  group_shape out;
  out.strategy = strategy;
  out.intensity = intensity;
  out.shutdown = shutdown;
  out.members = members;
  return out;
}

/// Carries out the machine's operations at once: a start is confirmed, a
/// stop ends the member; each is logged as "start X" or "stop X".
struct driver {
  explicit driver(group_shape s) : m(std::move(s)) {}

  group_machine m;
  std::vector<std::string> log;
  double now = 0;

  void run() {
    while (auto op = m.next()) {
      const auto& id = m.shape().members[op->member].id;
      if (op->kind == group_op::start) {
        log.push_back("start " + id);
        m.started(op->member, now);
      } else {
        log.push_back("stop " + id);
        m.ended(op->member, member_end::stopped, now);
      }
    }
  }

  /// The operations since the last call, joined by ", ".
  std::string ops() {
    std::string out;
    for (auto& x : log)
      out += (out.empty() ? "" : ", ") + x;
    log.clear();
    return out;
  }

  void start() {
    m.start(now);
    run();
  }

  /// Member `i` ends by itself at `at`; the group reacts.
  void end(std::size_t i, member_end how, double at) {
    now = at;
    m.ended(i, how, now);
    run();
  }
};

} // namespace

TEST_CASE("group: members start in order, each once the one before it is "
          "confirmed") {
  group_machine m{shape(group_strategy::one_for_one,
                        {member("a"), member("b"), member("c")})};
  CHECK_FALSE(m.next()); // not started yet
  m.start(0);
  CHECK(m.next() == group_op{group_op::start, 0});
  CHECK_FALSE(m.next()); // a's start is under way
  CHECK(m.phase(0) == member_phase::starting);
  m.started(0, 0);
  CHECK(m.phase(0) == member_phase::running);
  CHECK(m.next() == group_op{group_op::start, 1});
  m.started(1, 0);
  CHECK(m.next() == group_op{group_op::start, 2});
  m.started(2, 0);
  CHECK_FALSE(m.next());
  CHECK_FALSE(m.done());
}

TEST_CASE("group: the strategies restart the failed member, every member, "
          "or the failed member and those after it") {
  SECTION("one_for_one") {
    driver d{shape(group_strategy::one_for_one,
                   {member("a"), member("b"), member("c"), member("d")})};
    d.start();
    CHECK(d.ops() == "start a, start b, start c, start d");
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() == "start b");
    CHECK(d.m.restarts_of(1) == 1);
    CHECK(d.m.restarts_of(0) == 0);
  }
  SECTION("one_for_all: the others stop in reverse order, then all start in "
          "order") {
    driver d{shape(group_strategy::one_for_all,
                   {member("a"), member("b"), member("c"), member("d")})};
    d.start();
    d.ops();
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() ==
          "stop d, stop c, stop a, start a, start b, start c, start d");
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(d.m.restarts_of(i) == 1);
      CHECK(d.m.phase(i) == member_phase::running);
    }
  }
  SECTION("rest_for_one: the members after it stop in reverse order, then it "
          "and they start in order") {
    driver d{shape(group_strategy::rest_for_one,
                   {member("a"), member("b"), member("c"), member("d")})};
    d.start();
    d.ops();
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() == "stop d, stop c, start b, start c, start d");
    CHECK(d.m.restarts_of(0) == 0);
    CHECK(d.m.restarts_of(3) == 1);
    SECTION("the last member restarts alone") {
      d.end(3, member_end::failed, 2);
      CHECK(d.ops() == "start d");
    }
  }
}

TEST_CASE("group: restart types decide whether an end restarts") {
  driver d{shape(group_strategy::one_for_one,
                 {member("perm"), member("trans", restart_type::transient),
                  member("temp", restart_type::temporary)})};
  d.start();
  d.ops();
  SECTION("permanent restarts after a normal end too") {
    d.end(0, member_end::normal, 1);
    CHECK(d.ops() == "start perm");
  }
  SECTION("transient restarts after a failure only") {
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() == "start trans");
    d.end(1, member_end::normal, 2);
    CHECK(d.ops().empty());
    CHECK(d.m.phase(1) == member_phase::ended);
    CHECK_FALSE(d.m.done());
  }
  SECTION("temporary never restarts, and goes") {
    d.end(2, member_end::failed, 1);
    CHECK(d.ops().empty());
    CHECK(d.m.phase(2) == member_phase::removed);
  }
  SECTION("a member the user stopped is not restarted, even permanent") {
    d.end(0, member_end::stopped, 1);
    CHECK(d.ops().empty());
    CHECK(d.m.phase(0) == member_phase::ended);
  }
}

TEST_CASE("group: once every member has ended with none to restart, the "
          "group completes, failed when a member's last run failed") {
  driver d{
    shape(group_strategy::one_for_one, {member("a", restart_type::transient),
                                        member("b", restart_type::temporary)})};
  d.start();
  d.ops();
  d.end(0, member_end::normal, 1);
  CHECK_FALSE(d.m.done());
  SECTION("all normal") {
    d.end(1, member_end::normal, 2);
    REQUIRE(d.m.done());
    CHECK(d.m.end_reason() == group_end::completed);
    CHECK(d.m.end_as_member() == member_end::normal);
    CHECK_FALSE(d.m.end_member());
  }
  SECTION("a temporary member failed") {
    d.end(1, member_end::failed, 2);
    REQUIRE(d.m.done());
    CHECK(d.m.end_reason() == group_end::completed);
    CHECK(d.m.end_as_member() == member_end::failed);
    CHECK(d.m.end_member() == 1u);
  }
}

TEST_CASE("group: one restart beyond the intensity ends the group, which "
          "stops its members in reverse order and fails to its parent") {
  driver d{shape(group_strategy::one_for_one,
                 {member("a"), member("b"), member("c")}, {2, 10})};
  d.start();
  d.ops();
  d.end(1, member_end::failed, 1);
  d.end(1, member_end::failed, 2);
  CHECK(d.ops() == "start b, start b");
  CHECK(d.m.restarts_in_window(2) == 2);
  SECTION("a third within the period is one too many") {
    d.end(1, member_end::failed, 3);
    CHECK(d.ops() == "stop c, stop a");
    REQUIRE(d.m.done());
    CHECK(d.m.end_reason() == group_end::intensity);
    CHECK(d.m.end_as_member() == member_end::failed);
    CHECK(d.m.end_member() == 1u);
  }
  SECTION("restarts older than the period no longer count (both ends of the "
          "window count, as in OTP)") {
    // 1 and 2 are within the 10 s before 11 (1 exactly one period old).
    d.end(0, member_end::failed, 11);
    CHECK(d.ops() == "stop c, stop b");
    CHECK(d.m.end_reason() == group_end::intensity);
    driver e{shape(group_strategy::one_for_one, {member("a")}, {2, 10})};
    e.start();
    e.end(0, member_end::failed, 1);
    e.end(0, member_end::failed, 2);
    e.end(0, member_end::failed, 11.5);
    CHECK_FALSE(e.m.done());
    CHECK(e.m.restarts_in_window(11.5) == 2);
  }
  SECTION("the intensity counts decisions, not members: a one_for_all "
          "restart of three members is one restart") {
    driver e{shape(group_strategy::one_for_all,
                   {member("a"), member("b"), member("c")}, {1, 10})};
    e.start();
    e.end(0, member_end::failed, 1);
    CHECK_FALSE(e.m.done());
    CHECK(e.m.restarts_in_window(1) == 1);
  }
}

TEST_CASE("group: max_restarts 0 ends the group at the first restart") {
  driver d{
    shape(group_strategy::one_for_one, {member("a"), member("b")}, {0, 10})};
  d.start();
  d.ops();
  d.end(0, member_end::normal, 1);
  CHECK(d.ops() == "stop b");
  CHECK(d.m.end_reason() == group_end::intensity);
}

TEST_CASE("group: a significant member's end ends the group as auto_shutdown "
          "says") {
  SECTION("any_significant: the first one that ends for good") {
    driver d{shape(
      group_strategy::one_for_one,
      {member("a"), member("sig", restart_type::transient, true), member("c")},
      {3, 60}, auto_shutdown::any_significant)};
    d.start();
    d.ops();
    // A failure restarts a transient member: not an end for good.
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() == "start sig");
    CHECK_FALSE(d.m.done());
    d.end(1, member_end::normal, 2);
    CHECK(d.ops() == "stop c, stop a");
    REQUIRE(d.m.done());
    CHECK(d.m.end_reason() == group_end::auto_shutdown);
    CHECK(d.m.end_as_member() == member_end::normal);
    CHECK(d.m.end_member() == 1u);
  }
  SECTION("all_significant: once every significant member has ended") {
    driver d{
      shape(group_strategy::one_for_one,
            {member("s1", restart_type::temporary, true),
             member("s2", restart_type::transient, true), member("loop")},
            {3, 60}, auto_shutdown::all_significant)};
    d.start();
    d.ops();
    d.end(0, member_end::failed, 1);
    CHECK_FALSE(d.m.done());
    CHECK(d.ops().empty());
    d.end(1, member_end::normal, 2);
    CHECK(d.ops() == "stop loop");
    CHECK(d.m.end_reason() == group_end::auto_shutdown);
  }
  SECTION("never: a significant member is only a member") {
    driver d{shape(group_strategy::one_for_one,
                   {member("a", restart_type::transient, true), member("b")})};
    d.start();
    d.end(0, member_end::normal, 1);
    CHECK_FALSE(d.m.done());
  }
  SECTION("a significant member the group stops for a restart is not an end "
          "for good") {
    driver d{shape(group_strategy::one_for_all,
                   {member("sig", restart_type::transient, true), member("b")},
                   {3, 60}, auto_shutdown::any_significant)};
    d.start();
    d.ops();
    d.end(1, member_end::failed, 1);
    CHECK(d.ops() == "stop sig, start sig, start b");
    CHECK_FALSE(d.m.done());
  }
  SECTION("nor is one the user stopped") {
    driver d{shape(group_strategy::one_for_one,
                   {member("sig", restart_type::transient, true), member("b")},
                   {3, 60}, auto_shutdown::any_significant)};
    d.start();
    d.end(0, member_end::stopped, 1);
    CHECK_FALSE(d.m.done());
  }
}

TEST_CASE("group: a stop ends every member in reverse order, the group ends "
          "stopped") {
  driver d{shape(group_strategy::one_for_one,
                 {member("a"), member("b"), member("c")})};
  d.start();
  d.ops();
  d.m.stop(1);
  d.run();
  CHECK(d.ops() == "stop c, stop b, stop a");
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::stopped);
  CHECK(d.m.end_as_member() == member_end::stopped);
  SECTION("nothing more happens after the end") {
    d.end(0, member_end::failed, 2);
    CHECK(d.ops().empty());
    CHECK(d.m.end_reason() == group_end::stopped);
  }
}

TEST_CASE("group: a stop while a start is under way waits for it, then stops "
          "what started, and members not started yet never start") {
  group_machine m{shape(group_strategy::one_for_one,
                        {member("a"), member("b"), member("c")})};
  m.start(0);
  REQUIRE(m.next() == group_op{group_op::start, 0});
  m.started(0, 0);
  REQUIRE(m.next() == group_op{group_op::start, 1});
  m.stop(0);
  CHECK_FALSE(m.next()); // b's start is under way
  m.started(1, 0);
  CHECK(m.next() == group_op{group_op::stop, 1});
  m.ended(1, member_end::stopped, 0);
  CHECK(m.next() == group_op{group_op::stop, 0});
  m.ended(0, member_end::stopped, 0);
  CHECK_FALSE(m.next());
  CHECK(m.end_reason() == group_end::stopped);
  CHECK(m.phase(2) == member_phase::idle);
}

TEST_CASE("group: a temporary member taken along by a restart is stopped "
          "and not started again") {
  driver d{
    shape(group_strategy::one_for_all,
          {member("a"), member("temp", restart_type::temporary), member("c")})};
  d.start();
  d.ops();
  d.end(0, member_end::failed, 1);
  CHECK(d.ops() == "stop c, stop temp, start a, start c");
  CHECK(d.m.phase(1) == member_phase::removed);
}

TEST_CASE("group: one_for_all starts a transient member that had ended "
          "normally again, as OTP does") {
  driver d{shape(group_strategy::one_for_all,
                 {member("t", restart_type::transient), member("b")})};
  d.start();
  d.ops();
  d.end(0, member_end::normal, 1);
  CHECK(d.ops().empty());
  d.end(1, member_end::failed, 2);
  CHECK(d.ops() == "start t, start b");
}

TEST_CASE("group: a member that ends while a restart is stopping it is part "
          "of that restart, not one of its own") {
  group_machine m{shape(group_strategy::one_for_all,
                        {member("a"), member("b"), member("c")}, {1, 60})};
  m.start(0);
  for (std::size_t i = 0; i < 3; ++i) {
    REQUIRE(m.next() == group_op{group_op::start, i});
    m.started(i, 0);
  }
  m.ended(0, member_end::failed, 1);
  REQUIRE(m.next() == group_op{group_op::stop, 2});
  // b fails on its own before its stop comes: the restart takes it along.
  m.ended(1, member_end::failed, 1);
  m.ended(2, member_end::stopped, 1);
  CHECK(m.next() == group_op{group_op::start, 0});
  m.started(0, 1);
  CHECK(m.next() == group_op{group_op::start, 1});
  m.started(1, 1);
  CHECK(m.next() == group_op{group_op::start, 2});
  m.started(2, 1);
  CHECK_FALSE(m.done()); // one restart counted, within max_restarts 1
  CHECK(m.restarts_in_window(1) == 1);
}

TEST_CASE("group: a member that cannot start fails the group's first start, "
          "and is a failed run after it") {
  SECTION("at the first start: the started members stop in reverse order") {
    driver d{shape(group_strategy::one_for_one,
                   {member("a"), member("b"), member("c")})};
    d.m.start(0);
    REQUIRE(d.m.next() == group_op{group_op::start, 0});
    d.m.started(0, 0);
    REQUIRE(d.m.next() == group_op{group_op::start, 1});
    d.m.started(1, 0);
    REQUIRE(d.m.next() == group_op{group_op::start, 2});
    d.m.start_failed(2, 0);
    d.run();
    CHECK(d.ops() == "stop b, stop a");
    CHECK(d.m.end_reason() == group_end::start_failed);
    CHECK(d.m.end_member() == 2u);
    CHECK(d.m.end_as_member() == member_end::failed);
  }
  SECTION("later: a restart, within the intensity") {
    driver d{
      shape(group_strategy::one_for_one, {member("a"), member("b")}, {1, 60})};
    d.start();
    d.ops();
    d.m.ended(0, member_end::failed, 1);
    REQUIRE(d.m.next() == group_op{group_op::start, 0});
    d.m.start_failed(0, 1);
    d.run();
    CHECK(d.ops() == "stop b");
    CHECK(d.m.end_reason() == group_end::intensity);
  }
}

TEST_CASE("group: a tree escalates: a child group beyond its intensity is a "
          "failed member of its parent, which restarts it") {
  // The parent: the child group `inner` (permanent) and a task `t`.
  driver parent{shape(group_strategy::rest_for_one,
                      {member("inner"), member("t")}, {1, 60})};
  parent.start();
  CHECK(parent.ops() == "start inner, start t");
  driver inner{
    shape(group_strategy::one_for_one, {member("x"), member("y")}, {1, 60})};
  inner.start();
  inner.end(0, member_end::failed, 1);
  inner.end(0, member_end::failed, 2);
  CHECK(inner.ops() == "start x, start y, start x, stop y");
  REQUIRE(inner.m.done());
  // The carrier reports the child group's end to the parent.
  parent.end(0, inner.m.end_as_member(), 2);
  CHECK(parent.ops() == "stop t, start inner, start t");
  // Once more within the parent's period: the parent gives up too.
  parent.end(0, member_end::failed, 3);
  CHECK(parent.ops() == "stop t");
  CHECK(parent.m.end_reason() == group_end::intensity);
}

TEST_CASE("group: a snapshot restored into a new machine goes on as the old "
          "one would, restart window and history included") {
  driver d{
    shape(group_strategy::one_for_one, {member("a"), member("b")}, {2, 60})};
  d.start();
  d.ops();
  d.end(0, member_end::failed, 5);
  d.ops();
  d.m.ended(1, member_end::failed, 6);
  REQUIRE(d.m.next() == group_op{group_op::start, 1}); // under way
  auto st = d.m.snapshot();

  driver e{d.m.shape()};
  e.m.restore(st);
  CHECK(e.m.restarts_in_window(6) == 2);
  CHECK(e.m.history().size() == 2);
  CHECK(e.m.history()[1].member == 1);
  CHECK(e.m.history()[1].cause == member_end::failed);
  CHECK(e.m.restart_count() == 2);
  CHECK(e.m.restarts_of(0) == 1);
  // The start under way at the snapshot is confirmed to the new machine.
  CHECK_FALSE(e.m.next());
  e.m.started(1, 7);
  // The window came along: a third restart within 60 s ends the group.
  e.end(0, member_end::failed, 8);
  CHECK(e.ops() == "stop b");
  CHECK(e.m.end_reason() == group_end::intensity);
}

TEST_CASE("group: names of strategies, auto_shutdown values and ends") {
  for (auto x : {group_strategy::one_for_one, group_strategy::one_for_all,
                 group_strategy::rest_for_one})
    CHECK(parse_group_strategy(to_string(x)) == x);
  for (auto x : {auto_shutdown::never, auto_shutdown::any_significant,
                 auto_shutdown::all_significant})
    CHECK(parse_auto_shutdown(to_string(x)) == x);
  CHECK_FALSE(parse_group_strategy("simple_one_for_one"));
  CHECK_FALSE(parse_auto_shutdown(""));
  CHECK(to_string(group_end::intensity) == "intensity");
  CHECK(to_string(member_end::stopped) == "stopped");
}

namespace {

/// A workflow step: temporary, with the steps it depends on.
group_member_shape step(std::string id, std::vector<std::size_t> deps = {},
                        bool continue_on_failure = false) {
  group_member_shape m{std::move(id), restart_type::temporary, false};
  m.depends_on = std::move(deps);
  m.continue_on_failure = continue_on_failure;
  return m;
}

} // namespace

TEST_CASE("group steps: a step starts once the steps it depends on have "
          "succeeded, steps without dependencies start at once") {
  // review needs code and docs; code needs plan.
  driver d{shape(
    group_strategy::steps,
    {step("plan"), step("code", {0}), step("docs"), step("review", {1, 2})},
    {0, 60})};
  d.start();
  CHECK(d.ops() == "start plan, start docs");
  d.end(2, member_end::normal, 1);
  CHECK(d.ops().empty());
  d.end(0, member_end::normal, 2);
  CHECK(d.ops() == "start code");
  CHECK(d.m.phase(3) == member_phase::idle);
  d.end(1, member_end::normal, 3);
  CHECK(d.ops() == "start review");
  d.end(3, member_end::normal, 4);
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::completed);
  CHECK(d.m.end_as_member() == member_end::normal);
  CHECK(d.m.restart_count() == 0);
  // Not a strategy a group file may name.
  CHECK(to_string(group_strategy::steps) == "steps");
  CHECK_FALSE(parse_group_strategy("steps"));
  CHECK(to_string(member_phase::skipped) == "skipped");
}

TEST_CASE("group steps: a failed step skips every step that depends on it, "
          "directly or not, while the others run, and the workflow fails "
          "naming it") {
  driver d{
    shape(group_strategy::steps,
          {step("plan"), step("code", {0}), step("test", {1}), step("docs")},
          {0, 60})};
  d.start();
  CHECK(d.ops() == "start plan, start docs");
  d.end(0, member_end::failed, 1);
  CHECK(d.ops().empty());
  CHECK(d.m.phase(1) == member_phase::skipped);
  CHECK(d.m.phase(2) == member_phase::skipped);
  CHECK(d.m.snapshot().skipped == std::vector<std::size_t>{1, 2});
  CHECK(d.m.snapshot().members[2].skipped_by == std::size_t{0});
  CHECK_FALSE(d.m.done());
  d.end(3, member_end::normal, 2);
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::completed);
  CHECK(d.m.end_as_member() == member_end::failed);
  CHECK(d.m.end_member() == std::size_t{0});
}

TEST_CASE("group steps: continue_on_failure lets the dependents run and "
          "does not fail the workflow") {
  driver d{shape(group_strategy::steps,
                 {step("lint", {}, true), step("build", {0})}, {0, 60})};
  d.start();
  CHECK(d.ops() == "start lint");
  d.end(0, member_end::failed, 1);
  CHECK(d.ops() == "start build");
  d.end(1, member_end::normal, 2);
  REQUIRE(d.m.done());
  CHECK(d.m.end_as_member() == member_end::normal);
}

TEST_CASE("group steps: a step that cannot start skips its dependents, and "
          "a stop ends the running steps in reverse order") {
  group_machine m{shape(group_strategy::steps,
                        {step("a"), step("b", {0}), step("c")}, {0, 60})};
  m.start(0);
  CHECK(m.next() == group_op{group_op::start, 0});
  m.start_failed(0, 1);
  CHECK(m.phase(1) == member_phase::skipped);
  CHECK_FALSE(m.done()); // not the workflow's end: c still runs
  CHECK(m.next() == group_op{group_op::start, 2});
  m.started(2, 1);
  m.ended(2, member_end::normal, 2);
  REQUIRE(m.done());
  CHECK(m.end_as_member() == member_end::failed);
  driver d{
    shape(group_strategy::steps, {step("x"), step("y"), step("z")}, {0, 60})};
  d.start();
  d.ops();
  d.m.stop(3);
  d.run();
  CHECK(d.ops() == "stop z, stop y, stop x");
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::stopped);
}

TEST_CASE("group steps: a chain of 10,000 steps runs one after another") {
  group_shape s;
  s.strategy = group_strategy::steps;
  s.intensity = {0, 60};
  for (std::size_t i = 0; i < 10000; ++i)
    s.members.push_back(
      step("s" + std::to_string(i), i == 0 ? std::vector<std::size_t>{}
                                           : std::vector<std::size_t>{i - 1}));
  group_machine m{std::move(s)};
  m.start(0);
  for (std::size_t i = 0; i < 10000; ++i) {
    auto op = m.next();
    REQUIRE(op == group_op{group_op::start, i});
    REQUIRE_FALSE(m.next());
    m.started(i, 0);
    m.ended(i, member_end::normal, 0);
  }
  CHECK(m.done());
  CHECK(m.end_as_member() == member_end::normal);
}

namespace {

/// A best-of-N step's race of `n` racers "r1".."rN".
group_shape race_of(std::size_t n) {
  group_shape out;
  out.strategy = group_strategy::race;
  out.intensity = {0, 60};
  for (std::size_t k = 1; k <= n; ++k)
    out.members.push_back(step("r" + std::to_string(k)));
  return out;
}

} // namespace

TEST_CASE("group race: every racer starts, the first to succeed wins and "
          "the others are stopped, last first") {
  driver d{race_of(4)};
  d.start();
  CHECK(d.ops() == "start r1, start r2, start r3, start r4");
  // A failure only drops that racer out.
  d.end(0, member_end::failed, 1);
  CHECK(d.ops().empty());
  CHECK_FALSE(d.m.done());
  d.end(2, member_end::normal, 2);
  CHECK(d.ops() == "stop r4, stop r2");
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::won);
  CHECK(d.m.end_member() == std::size_t{2});
  CHECK(d.m.end_as_member() == member_end::normal);
  CHECK(d.m.last_end(1) == member_end::stopped);
  CHECK(d.m.restart_count() == 0);
  CHECK(to_string(group_strategy::race) == "race");
  CHECK(to_string(group_end::won) == "won");
  // Not a strategy a group file may name.
  CHECK_FALSE(parse_group_strategy("race"));
}

TEST_CASE("group race: a second success while the losers stop changes "
          "nothing: the first one won") {
  group_machine m{race_of(3)};
  m.start(0);
  for (std::size_t k = 0; k < 3; ++k) {
    REQUIRE(m.next() == group_op{group_op::start, k});
    m.started(k, 0);
  }
  m.ended(1, member_end::normal, 1);
  REQUIRE(m.next() == group_op{group_op::stop, 2});
  // r3 had passed its gates too: its success is its own end, not a win.
  m.ended(2, member_end::normal, 1);
  REQUIRE(m.next() == group_op{group_op::stop, 0});
  m.ended(0, member_end::stopped, 2);
  CHECK_FALSE(m.next());
  REQUIRE(m.done());
  CHECK(m.end_reason() == group_end::won);
  CHECK(m.end_member() == std::size_t{1});
}

TEST_CASE("group race: when every racer fails, stops or cannot start, the "
          "race fails, naming its first racer") {
  driver d{race_of(3)};
  d.start();
  d.ops();
  d.end(2, member_end::failed, 1);
  d.end(0, member_end::stopped, 2);
  CHECK_FALSE(d.m.done());
  d.end(1, member_end::failed, 3);
  REQUIRE(d.m.done());
  CHECK(d.m.end_reason() == group_end::completed);
  CHECK(d.m.end_as_member() == member_end::failed);
  CHECK(d.m.end_member() == std::size_t{0});
  // A racer that cannot start drops out; the others still race.
  group_machine m{race_of(2)};
  m.start(0);
  REQUIRE(m.next() == group_op{group_op::start, 0});
  m.start_failed(0, 0);
  CHECK_FALSE(m.done());
  REQUIRE(m.next() == group_op{group_op::start, 1});
  m.started(1, 0);
  m.ended(1, member_end::normal, 1);
  REQUIRE(m.done());
  CHECK(m.end_reason() == group_end::won);
  CHECK(m.end_member() == std::size_t{1});
}

// A group's carrier on the simulated clock: it starts and stops its task
// members through a host in the order the strategies say, restarts within
// its intensity on the actor clock, runs nested groups as supervisors of
// their own, and tells its parent how it ended.

#include "tasksup/actors/group_supervisor_actor.hpp"
#include "tasksup/actors/journal_codec.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// Test -> fake host: member `id` of the group that started it ends `how`.
using finish_atom = caf::atom_constant<caf::atom("finish")>;

/// What the fake host saw and did.
struct host_log {
  /// "start X" and "stop X", in order.
  std::vector<std::string> ops;
  /// Members whose start the host refuses.
  std::set<std::string> refuse;
  /// The group that started each member.
  std::map<std::string, caf::actor> group_of;
  /// The run tokens of each member's starts, in order.
  std::map<std::string, std::vector<std::int64_t>> runs;

  std::string take() {
    std::string out;
    for (auto& x : ops)
      out += (out.empty() ? "" : ", ") + x;
    ops.clear();
    return out;
  }
};

/// A host whose members run until the test finishes them; a stop ends a
/// member at once (`stopped`).
caf::actor fake_host(fixture& fx, std::shared_ptr<host_log> log) {
  auto host = fx.sys().spawn([log](caf::event_based_actor* self) {
    return caf::behavior{
      [=](member_start_atom, const std::string&, const task_spec& task,
          std::int64_t run) {
        log->ops.push_back("start " + task.id);
        log->runs[task.id].push_back(run);
        if (log->refuse.count(task.id) > 0)
          return false;
        log->group_of[task.id] =
          caf::actor_cast<caf::actor>(self->current_sender());
        return true;
      },
      [=](member_stop_atom, const std::string& id, double grace_s) {
        log->ops.push_back((grace_s > 0 ? "stop " : "kill ") + id);
        self->send(log->group_of.at(id), member_ended_atom::value, id,
                   member_end::stopped);
      },
      [=](finish_atom, const std::string& id, member_end how) {
        self->send(log->group_of.at(id), member_ended_atom::value, id, how);
      },
    };
  });
  return fx.keep(host);
}

/// Records the reports a parent gets, and "started" when it hears that the
/// group started every member.
group_parent_actor parent_of(fixture& fx,
                             std::shared_ptr<std::vector<group_report>> out,
                             std::shared_ptr<host_log> log) {
  auto parent = fx.sys().spawn([out, log](caf::event_based_actor*) {
    return caf::behavior{
      [=](group_started_atom, const std::string& id) {
        log->ops.push_back("started " + id);
      },
      [=](group_ended_atom, const group_report& r) { out->push_back(r); },
    };
  });
  fx.keep(parent);
  return caf::actor_cast<group_parent_actor>(parent);
}

group_spec parse(const std::string& text) {
  auto doc = parse_json_text(text, "team.json");
  REQUIRE(doc);
  auto g = parse_group(*doc, "team.json", builtin_config());
  INFO((g ? std::string{} : g.error().to_string()));
  REQUIRE(g);
  return std::move(*g);
}

std::string task(const std::string& id,
                 const std::string& restart = "permanent") {
  return R"({"id": ")" + id +
         R"(", "prompt": "p", "supervisor": {"restart": ")" + restart +
         R"("}, "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true"}]}})";
}

struct group_fixture : fixture {
  std::shared_ptr<host_log> log = std::make_shared<host_log>();
  std::shared_ptr<std::vector<group_report>> reports =
    std::make_shared<std::vector<group_report>>();
  caf::actor host = fake_host(*this, log);
  group_supervisor_actor group;

  void start(const std::string& text) {
    group_options opts;
    opts.spec = std::make_shared<const group_spec>(parse(text));
    opts.host = caf::actor_cast<group_host_actor>(host);
    opts.parent = parent_of(*this, reports, log);
    group = spawn_group(sys(), std::move(opts));
    keep_dynamic(group);
    run();
  }

  void finish(const std::string& id, member_end how) {
    caf::anon_send(host, finish_atom::value, id, how);
    run();
  }
};

} // namespace

TEST_CASE_METHOD(group_fixture,
                 "group actor: members start in order through the host, "
                 "one_for_all stops the others in reverse and starts all "
                 "again",
                 "[group]") {
  start(R"({"group": {"id": "team", "strategy": "one_for_all", "members": [)" +
        task("a") + "," + task("b") + "," + task("c") + "]}}");
  CHECK(log->take() == "start a, start b, start c, started team");
  finish("b", member_end::failed);
  CHECK(log->take() == "stop c, stop a, start a, start b, start c");
  CHECK(reports->empty());
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: restarts beyond the intensity within its "
                 "period, on the actor's clock, end the group and tell the "
                 "parent why",
                 "[group]") {
  start(R"({"group": {"id": "team", "intensity": {"max_restarts": 2,
           "period_s": 60}, "members": [)" +
        task("a") + "," + task("b") + "]}}");
  log->take();
  finish("b", member_end::failed);
  advance(30);
  finish("b", member_end::failed);
  CHECK(log->take() == "start b, start b");
  SECTION("a third within 60 s escalates") {
    advance(29);
    finish("b", member_end::failed);
    CHECK(log->take() == "stop a");
    REQUIRE(reports->size() == 1);
    auto& r = reports->front();
    CHECK(r.group_id == "team");
    CHECK(r.as_member == member_end::failed);
    CHECK(r.reason == group_end::intensity);
    CHECK(r.by_member == "b");
    CHECK(r.restarts == 2);
  }
  SECTION("one after the first has left the window is allowed") {
    advance(31);
    finish("b", member_end::failed);
    CHECK(log->take() == "start b");
    CHECK(reports->empty());
  }
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: stop ends the members in reverse order and "
                 "the group as stopped",
                 "[group]") {
  start(R"({"group": {"id": "team", "members": [)" + task("a") + "," +
        task("b") + "," + task("c") + "]}}");
  log->take();
  caf::anon_send(group, stop_atom::value, stop_mode::cancel);
  run();
  CHECK(log->take() == "stop c, stop b, stop a");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::stopped);
  CHECK(reports->front().as_member == member_end::stopped);
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: a significant member's normal end shuts the "
                 "group down as auto_shutdown says",
                 "[group]") {
  start(R"({"group": {"id": "team", "auto_shutdown": "any_significant",
           "members": [)" +
        task("loop") + R"(, {"id": "goal", "prompt": "p", "significant": true,
           "supervisor": {"restart": "transient"}, "agent_selection":
           {"agents": [{"agent_id": "a", "agent_cli": "/bin/true"}]}}]}})");
  log->take();
  finish("goal", member_end::normal);
  CHECK(log->take() == "stop loop");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::auto_shutdown);
  CHECK(reports->front().as_member == member_end::normal);
  CHECK(reports->front().by_member == "goal");
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: a member the host cannot start fails the "
                 "group's start, and the members started stop",
                 "[group]") {
  log->refuse.insert("c");
  start(R"({"group": {"id": "team", "members": [)" + task("a") + "," +
        task("b") + "," + task("c") + "]}}");
  CHECK(log->take() == "start a, start b, start c, stop b, stop a");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::start_failed);
  CHECK(reports->front().by_member == "c");
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: a nested group escalates to the group above, "
                 "which restarts it with a new supervisor",
                 "[group]") {
  start(R"({"group": {"id": "top", "strategy": "rest_for_one",
           "intensity": {"max_restarts": 1, "period_s": 60}, "members": [
           {"group": {"id": "inner", "intensity": {"max_restarts": 1,
             "period_s": 60}, "members": [)" +
        task("x") + "," + task("y") + "]}}," + task("t") + "]}}");
  // The inner group counts as started once x and y are: t starts after.
  CHECK(log->take() == "start x, start y, start t, started top");
  finish("x", member_end::failed);
  CHECK(log->take() == "start x");
  // The inner group's second restart within its period: it stops y and
  // escalates; the top group restarts it (and t, after it).
  finish("x", member_end::failed);
  CHECK(log->take() == "stop y, stop t, start x, start y, start t");
  CHECK(reports->empty());
  // Once more: the top group's own intensity is exceeded.
  finish("y", member_end::failed);
  finish("y", member_end::failed);
  CHECK(log->take() == "start y, stop x, stop t");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().group_id == "top");
  CHECK(reports->front().reason == group_end::intensity);
  CHECK(reports->front().by_member == "inner");
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: stopping a tree stops the nested group's "
                 "members too, last member first",
                 "[group]") {
  start(R"({"group": {"id": "top", "members": [)" + task("a") +
        R"(, {"group": {"id": "inner", "members": [)" + task("x") + "," +
        task("y") + "]}}," + task("z") + "]}}");
  CHECK(log->take() == "start a, start x, start y, start z, started top");
  caf::anon_send(group, stop_atom::value, stop_mode::cancel);
  run();
  CHECK(log->take() == "stop z, stop y, stop x, stop a");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::stopped);
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: a nested group that cannot start fails the "
                 "start of the group above, which never says it started",
                 "[group]") {
  log->refuse.insert("y");
  start(R"({"group": {"id": "top", "members": [)" + task("a") +
        R"(, {"group": {"id": "inner", "members": [)" + task("x") + "," +
        task("y") + "]}}," + task("z") + "]}}");
  CHECK(log->take() == "start a, start x, start y, stop x, stop a");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::start_failed);
  CHECK(reports->front().by_member == "inner");
}

TEST_CASE_METHOD(group_fixture,
                 "group actor: a kill stops every member of the tree at once, "
                 "last member first",
                 "[group]") {
  start(R"({"group": {"id": "top", "members": [)" + task("a") +
        R"(, {"group": {"id": "inner", "members": [)" + task("x") + "," +
        task("y") + "]}}," + task("z") + "]}}");
  log->take();
  caf::anon_send(group, stop_atom::value, stop_mode::kill);
  run();
  CHECK(log->take() == "kill z, kill y, kill x, kill a");
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::stopped);
}

namespace {

/// The records a fake journal was sent, by row.
using journaled = std::map<std::int64_t, std::vector<std::string>>;

/// A journal that keeps the group records it is sent.
journal_actor fake_journal(fixture& fx, std::shared_ptr<journaled> out) {
  auto journal = fx.sys().spawn([out](caf::event_based_actor*) {
    return caf::behavior{
      [=](jrecord_atom, std::int64_t seq, std::int64_t n,
          const std::string& body) {
        auto& rows = (*out)[seq];
        CHECK(n == static_cast<std::int64_t>(rows.size()) + 1);
        rows.push_back(body);
      },
    };
  });
  fx.keep(journal);
  return caf::actor_cast<journal_actor>(journal);
}

/// `ops` sorted: members of different groups start in no fixed order.
std::vector<std::string> sorted(std::vector<std::string> ops) {
  std::sort(ops.begin(), ops.end());
  return ops;
}

} // namespace

TEST_CASE_METHOD(group_fixture,
                 "group actor: a tree resumed from its journaled inputs asks "
                 "the host for its running members by their run tokens, "
                 "starts nothing new, and keeps its restart window",
                 "[group]") {
  auto records = std::make_shared<journaled>();
  auto journal = fake_journal(*this, records);
  auto spec = std::make_shared<const group_spec>(
    parse(R"({"group": {"id": "team", "intensity": {"max_restarts": 1,
             "period_s": 60}, "members": [)" +
          task("a") + R"(, {"group": {"id": "inner", "members": [)" +
          task("c") + "]}}," + task("b") + "]}}"));
  // Rows 1 and 2 of the journal are the two groups'.
  auto tree_for = [&] {
    auto tree = make_group_tree(*spec, 42);
    tree->journal = journal;
    tree->groups.at("team")->seq = 1;
    tree->groups.at("inner")->seq = 2;
    return tree;
  };
  auto start_tree = [&](std::shared_ptr<group_tree> tree) {
    group_options opts;
    opts.spec = spec;
    opts.host = caf::actor_cast<group_host_actor>(host);
    opts.parent = parent_of(*this, reports, log);
    opts.seed = 42;
    opts.tree = std::move(tree);
    group = spawn_group(sys(), std::move(opts));
    keep_dynamic(group);
    run();
  };
  start_tree(tree_for());
  CHECK(sorted(log->ops) ==
        sorted({"start a", "start c", "start b", "started team"}));
  log->take();
  // One restart: the window of one is full for the next 60 s.
  finish("a", member_end::failed);
  CHECK(log->take() == "start a");
  auto before = log->runs;
  REQUIRE(before["a"].size() == 2);
  CHECK(before["a"][0] != before["a"][1]);
  // The node dies: the supervisors go without a word, the members run on.
  caf::anon_send_exit(group, caf::exit_reason::kill);
  run();
  REQUIRE(reports->empty());
  REQUIRE(records->count(1) == 1);
  REQUIRE(records->count(2) == 1);
  advance(10);
  auto tree = tree_for();
  for (auto& [seq, bodies] : *records) {
    auto& slot = *tree->groups.at(seq == 1 ? "team" : "inner");
    for (auto& b : bodies) {
      auto in = decode_group_input(b, "record");
      REQUIRE(in);
      slot.replay.push_back(*in);
    }
  }
  auto written = (*records)[1].size();
  start_tree(std::move(tree));
  // Each running member is asked for again with the run it had; the parent
  // hears again that the group started (it ignores a second word).
  CHECK(sorted(log->ops) ==
        sorted({"start a", "start c", "start b", "started team"}));
  log->take();
  CHECK(log->runs["a"].back() == before["a"].back());
  CHECK(log->runs["b"].back() == before["b"].back());
  CHECK(log->runs["c"].back() == before["c"].back());
  // Nothing was fed again: the journal has no new records.
  CHECK((*records)[1].size() == written);
  // The restart before the crash still counts: b's failure is one too many.
  finish("b", member_end::failed);
  REQUIRE(reports->size() == 1);
  CHECK(reports->front().reason == group_end::intensity);
  CHECK(reports->front().by_member == "b");
  // The journal goes on numbering the group's records after the replayed.
  CHECK((*records)[1].size() > written);
}

// The scheduler on the simulated clock: it fires on time, follows each
// overlap policy while a run is going, catches up after a restart from its
// saved state (at most `catchup` runs, none twice), and answers `schedule`
// requests (add, pause, resume, delete, list) with clear refusals.

#include "tasksup/actors/schedule_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <boost/json/parse.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// Test -> fake host: run `id` ends.
using finish_atom = caf::atom_constant<caf::atom("finish")>;

/// What the fake host saw.
struct host_log {
  /// Task ids submitted, in order.
  std::vector<std::string> submitted;
  /// Ids stopped, in order.
  std::vector<std::string> stopped;
  /// Ids the host says it has already (submitted before a restart).
  std::set<std::string> known;
  /// Runs still going, with who awaits them.
  std::map<std::string, std::vector<caf::response_promise>> awaiting;
  std::set<std::string> running;
};

task_result ended(const std::string& id) {
  task_result r;
  r.task_id = id;
  r.outcome = task_outcome::succeeded;
  return r;
}

/// A host whose runs go on until the test finishes them (or the scheduler
/// stops them).
schedule_host_actor fake_host(fixture& fx, std::shared_ptr<host_log> log) {
  auto host = fx.sys().spawn([log](caf::event_based_actor* self) {
    auto finish = [log](const std::string& id) {
      log->running.erase(id);
      for (auto& rp : log->awaiting[id])
        rp.deliver(ended(id));
      log->awaiting.erase(id);
    };
    return caf::behavior{
      [=](submit_atom, const task_spec& task) -> caf::result<std::string> {
        if (log->known.count(task.id) > 0)
          return make_error(protocol_error::duplicate_task,
                            "'" + task.id + "' exists already");
        log->submitted.push_back(task.id);
        log->running.insert(task.id);
        return task.id;
      },
      [=](await_atom, const std::string& id) -> caf::result<task_result> {
        if (log->running.count(id) == 0)
          return ended(id);
        auto rp = self->make_response_promise();
        log->awaiting[id].push_back(rp);
        return caf::delegated<task_result>{};
      },
      [=](stop_atom, const std::string& id, stop_mode) {
        log->stopped.push_back(id);
        finish(id);
        return true;
      },
      [=](finish_atom, const std::string& id) { finish(id); },
    };
  });
  fx.keep(host);
  return caf::actor_cast<schedule_host_actor>(host);
}

/// A journal that keeps the last "schedules" state it was sent.
caf::actor fake_journal(fixture& fx, std::shared_ptr<std::string> saved) {
  return fx.keep(fx.sys().spawn([saved](caf::event_based_actor*) {
    return caf::behavior{
      [=](jstate_atom, const std::string& key, const std::string& bytes) {
        if (key == "schedules")
          *saved = bytes;
      },
    };
  }));
}

schedule_spec spec_of(const std::string& text) {
  auto doc = parse_json_text(text, "s.json");
  REQUIRE(doc);
  auto s = parse_schedule(*doc, "s.json");
  INFO((s ? std::string{} : s.error().to_string()));
  REQUIRE(s);
  return std::move(*s);
}

std::string schedule_text(const std::string& every,
                          const std::string& more = "") {
  return R"({"every": ")" + every + R"(", )" + more +
         R"("task": {"prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "/bin/true"}]}}})";
}

struct scheduler_fixture : fixture {
  std::shared_ptr<host_log> log = std::make_shared<host_log>();
  std::shared_ptr<std::string> saved = std::make_shared<std::string>();
  schedule_host_actor host = fake_host(*this, log);
  caf::actor journal = fake_journal(*this, saved);
  scheduler_actor sched;

  /// Starts a scheduler with these file schedules and saved state.
  void start(std::map<std::string, std::string> files,
             const std::string& state = {}) {
    scheduler_options opts;
    opts.host = host;
    opts.journal = caf::actor_cast<journal_actor>(journal);
    opts.config = builtin_config();
    for (auto& [name, text] : files)
      opts.config.schedules.emplace(name, spec_of(text));
    opts.saved = state;
    sched = keep(spawn_scheduler(sys(), std::move(opts)));
    run();
  }

  caf::expected<std::vector<schedule_info>>
  request(schedule_op op, const std::string& name = {},
          const std::string& document = {}) {
    auto r = ask<std::vector<schedule_info>>(
      sched, schedule_atom::value, schedule_request{op, name, document});
    REQUIRE(r);
    return *r;
  }

  schedule_info one(const std::string& name) {
    auto all = request(schedule_op::list);
    REQUIRE(all);
    for (auto& x : *all)
      if (x.name == name)
        return x;
    FAIL("no schedule " << name);
    return {};
  }

  void finish(const std::string& id) {
    caf::anon_send(caf::actor_cast<caf::actor>(host), finish_atom::value, id);
    run();
  }
};

} // namespace

TEST_CASE_METHOD(scheduler_fixture,
                 "scheduler: an interval fires once per period, its run "
                 "named by its due time, and skip drops a fire while the run "
                 "is going") {
  start({{"tick", schedule_text("10s")}});
  auto first = one("tick");
  CHECK(first.source == "file");
  CHECK(first.timing == "every 10s");
  CHECK(first.overlap == "skip");
  CHECK(first.next_s > 0);
  CHECK(log->submitted.empty());
  advance(10);
  REQUIRE(log->submitted.size() == 1);
  CHECK(log->submitted[0] == schedule_run_id("tick", first.next_s));
  auto now = one("tick");
  CHECK(now.running == log->submitted[0]);
  CHECK(now.last_s == first.next_s);
  CHECK(now.next_s == first.next_s + 10);
  // Still going at the next fire: skipped.
  advance(10);
  CHECK(log->submitted.size() == 1);
  CHECK(one("tick").skipped == 1);
  finish(log->submitted[0]);
  CHECK(one("tick").running.empty());
  advance(10);
  CHECK(log->submitted.size() == 2);
  CHECK(one("tick").runs == 2);
  CHECK(schedule_run_id("nightly", 1796526000.5) == "nightly-20261206T030000Z");
}

TEST_CASE_METHOD(scheduler_fixture,
                 "scheduler: buffer_one starts one waiting fire when the run "
                 "ends, cancel_other stops the run first, allow_all runs "
                 "both") {
  start({{"buf", schedule_text("10s", R"("overlap": "buffer_one", )")},
         {"cancel", schedule_text("10s", R"("overlap": "cancel_other", )")},
         {"all", schedule_text("10s", R"("overlap": "allow_all", )")}});
  advance(10);
  REQUIRE(log->submitted.size() == 3);
  auto buf_first = one("buf").running;
  auto cancel_first = one("cancel").running;
  auto due_second = one("buf").next_s;
  advance(10);
  advance(10);
  // buffer_one: one fire waits (the second is dropped), nothing started.
  CHECK(one("buf").running == buf_first);
  // cancel_other: the run was stopped and the new one started.
  CHECK(std::count(log->stopped.begin(), log->stopped.end(), cancel_first) ==
        1);
  CHECK(one("cancel").running != cancel_first);
  CHECK_FALSE(one("cancel").running.empty());
  // allow_all: a run per fire.
  CHECK(one("all").runs == 3);
  finish(buf_first);
  auto buf_now = one("buf");
  CHECK(buf_now.running == schedule_run_id("buf", due_second));
  CHECK(buf_now.runs == 2);
}

TEST_CASE_METHOD(scheduler_fixture,
                 "scheduler: after a restart the runs it missed are caught "
                 "up, at most catchup of them, and a run submitted before "
                 "the restart is not submitted again") {
  auto tick = schedule_text("10s", R"("overlap": "allow_all", )");
  auto few = schedule_text("10s", R"("overlap": "allow_all", "catchup": 3, )");
  start({{"tick", tick}, {"few", few}});
  advance(10);
  REQUIRE(log->submitted.size() == 2);
  auto last = one("tick").last_s;
  for (auto id : log->submitted)
    finish(id);
  auto state = *saved;
  REQUIRE_FALSE(state.empty());
  // The node is down for 65 s: 6 or 7 fires missed, the last at L.
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  run();
  advance(65);
  log->submitted.clear();
  // tick's one catch-up run (at L) was submitted before the node died: the
  // host has it already.
  log->known.insert(schedule_run_id("tick", last + 60));
  log->known.insert(schedule_run_id("tick", last + 70));
  start({{"tick", tick}, {"few", few}}, state);
  auto l = one("few").last_s;
  CHECK((l == last + 60 || l == last + 70));
  // few catches up its three most recent, oldest first.
  CHECK(log->submitted ==
        std::vector<std::string>{schedule_run_id("few", l - 20),
                                 schedule_run_id("few", l - 10),
                                 schedule_run_id("few", l)});
  CHECK(one("few").runs == 4);
  // tick's is the one the host had: awaited (it ended), not run again.
  auto t = one("tick");
  CHECK(t.last_s == l);
  CHECK(t.running.empty());
  CHECK(t.next_s == l + 10);
}

TEST_CASE_METHOD(scheduler_fixture,
                 "scheduler: schedules added by command fire, pause and "
                 "resume (without catching up), survive a restart and are "
                 "deleted, and bad requests are refused saying why") {
  start({{"file", schedule_text("10s")}});
  auto added = request(schedule_op::add, "cmd",
                       schedule_text("20s", R"("overlap": "buffer_one", )"));
  REQUIRE(added);
  REQUIRE(added->size() == 1);
  CHECK(added->front().source == "command");
  CHECK(added->front().timing == "every 20s");
  CHECK(added->front().overlap == "buffer_one");
  // Refusals.
  auto twice = request(schedule_op::add, "cmd", schedule_text("20s"));
  REQUIRE_FALSE(twice);
  CHECK_THAT(error_text(twice.error()), Catch::Contains("exists already"));
  auto bad = request(schedule_op::add, "bad", R"({"every": "0s", "task": {}})");
  REQUIRE_FALSE(bad);
  CHECK_THAT(error_text(bad.error()), Catch::Contains("/every"));
  auto bad_task = request(schedule_op::add, "bad",
                          R"({"every": "10s", "task": {"prompt": 3}})");
  REQUIRE_FALSE(bad_task);
  CHECK_THAT(error_text(bad_task.error()), Catch::Contains("/prompt"));
  auto bad_name = request(schedule_op::add, "no/slash", schedule_text("10s"));
  REQUIRE_FALSE(bad_name);
  CHECK_THAT(error_text(bad_name.error()), Catch::Contains("schedule name"));
  auto unknown = request(schedule_op::pause, "nope");
  REQUIRE_FALSE(unknown);
  CHECK_THAT(error_text(unknown.error()), Catch::Contains("no schedule"));
  auto file = request(schedule_op::remove, "file");
  REQUIRE_FALSE(file);
  CHECK_THAT(error_text(file.error()), Catch::Contains("remove the file"));
  // Paused, nothing fires; resumed, what it missed is not caught up.
  REQUIRE(request(schedule_op::pause, "cmd"));
  CHECK(one("cmd").paused);
  CHECK(one("cmd").next_s == 0);
  advance(100);
  for (auto& id : log->submitted)
    CHECK(id.rfind("file-", 0) == 0);
  auto files = log->submitted.size();
  REQUIRE(request(schedule_op::resume, "cmd"));
  CHECK(log->submitted.size() == files);
  CHECK(one("cmd").next_s > 0);
  advance(20);
  CHECK(log->submitted.size() == files + 1);
  // A restart keeps the added schedule and that it is paused.
  REQUIRE(request(schedule_op::pause, "cmd"));
  auto state = *saved;
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  run();
  start({{"file", schedule_text("10s")}}, state);
  auto back = one("cmd");
  CHECK(back.paused);
  CHECK(back.source == "command");
  CHECK(back.runs == 1);
  auto gone = request(schedule_op::remove, "cmd");
  REQUIRE(gone);
  auto all = request(schedule_op::list);
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK(all->front().name == "file");
  // Deleted for good: not back after a restart.
  state = *saved;
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  run();
  start({{"file", schedule_text("10s")}}, state);
  CHECK(request(schedule_op::list)->size() == 1);
}

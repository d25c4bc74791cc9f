// The registry: shared agent health, the retry budget, the attempt queue,
// round-robin, control messages and bad input, on simulated time; plus one
// run of 10,000 tasks on the real threaded scheduler.

#include "tasksup/actors/registry_actor.hpp"

#include "registry_fixture.hpp"

#include <catch2/catch.hpp>

#include <caf/scoped_actor.hpp>

#include <boost/json/parse.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// A task the journal holds as succeeded, finished at `at`.
journal_entry finished_journaled(const std::string& id, double at) {
  journal_entry e;
  e.task.spec.id = id;
  task_status s;
  s.task_id = id;
  s.state = task_state::done;
  task_result r;
  r.task_id = id;
  r.outcome = task_outcome::succeeded;
  s.result = r;
  e.finished = s;
  e.finished_at = at;
  return e;
}

} // namespace

TEST_CASE_METHOD(registry_fixture,
                 "a breaker opened by one task's failures makes another "
                 "task skip the agent",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.breaker.max_failures = 2;
  cfg.node.breaker.reset_timeout_s = 300;
  start(cfg);
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(0)});
  auto t1 = task_with("t1", {"a", "b"});
  t1.supervisor.max_retries_per_agent = 1;
  submit(t1);
  advance(5);
  CHECK(await("t1").metadata.agent_id == "b");
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "a", "b"});
  // Two consecutive failures of `a` opened its breaker.
  submit(task_with("t2", {"a", "b"}));
  CHECK(agents_started("t2") == std::vector<std::string>{"b"});
  auto r2 = await("t2");
  CHECK(r2.outcome == task_outcome::succeeded);
  CHECK(r2.metadata.fallback_count == 1);
  auto sw = seen->of(event_kind::agent_switched, "t2");
  REQUIRE(sw.size() == 1);
  CHECK(sw[0].json().find("circuit breaker") != std::string::npos);
  // After the reset timeout one probe goes through again.
  advance(300);
  runtime->script("a", {exits(0)});
  submit(task_with("t3", {"a", "b"}));
  CHECK(agents_started("t3") == std::vector<std::string>{"a"});
}

TEST_CASE_METHOD(registry_fixture,
                 "a status or stop request that meets a task as it finishes "
                 "is answered from the finished task, not with an error",
                 "[registry]") {
  start(builtin_config());
  runtime->script("a", {exits(0, {}, 1)});
  submit(task_with("t", {"a"}));
  CHECK(status("t").state != task_state::done);
  // Both questions reach the registry while the attempt runs; the registry
  // reads them only after the supervisor has sent its result and ended, so
  // it asks a supervisor that is gone.
  auto st = ask_later<task_status>(reg, status_atom::value, std::string{"t"});
  auto stopped =
    ask_later<bool>(reg, stop_atom::value, std::string{"t"}, stop_mode::cancel);
  auto all = ask_later<std::vector<task_status>>(reg, status_atom::value);
  advance_all_but(reg, 1);
  CHECK_FALSE(st->has_value());
  run();
  REQUIRE(st->has_value());
  REQUIRE(**st);
  CHECK((**st)->state == task_state::done);
  REQUIRE((**st)->result);
  CHECK((**st)->result->outcome == task_outcome::succeeded);
  // Nothing to stop any more.
  REQUIRE(stopped->has_value());
  REQUIRE(**stopped);
  CHECK(***stopped == false);
  // The listing still shows the task.
  REQUIRE(all->has_value());
  REQUIRE(**all);
  REQUIRE((**all)->size() == 1);
  CHECK((**all)->front().state == task_state::done);
}

TEST_CASE_METHOD(registry_fixture,
                 "an empty retry budget turns retries into fallbacks",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.retry_budget_capacity = 1;
  cfg.node.retry_budget_refill_per_s = 0;
  start(cfg);
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(0)});
  submit(task_with("t1", {"a", "b"}));
  // The budget is asked when a retry would start, with the slot and the
  // breaker in one request: the first retry waits 5 s and takes the only
  // token.
  CHECK(seen->of(event_kind::retry_scheduled, "t1").size() == 1);
  advance(5);
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "a"});
  // The second retry waits its 15 s, finds the budget dry and moves to `b`
  // without running `a` again.
  advance(15);
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "a", "b"});
  CHECK(seen->of(event_kind::retry_scheduled, "t1").size() == 2);
  auto sw = seen->of(event_kind::agent_switched, "t1");
  REQUIRE(sw.size() == 1);
  CHECK(sw[0].json().find("retry budget exhausted") != std::string::npos);
  auto r = await("t1");
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.metadata.agent_id == "b");
}

TEST_CASE_METHOD(registry_fixture,
                 "max_concurrent queues attempts in submission order",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.max_concurrent = 1;
  start(cfg);
  runtime->script("a", {exits(0, {}, 10)});
  submit(task_with("t1", {"a"}));
  submit(task_with("t2", {"a"}));
  submit(task_with("t3", {"a"}));
  CHECK(runtime->started() == 1);
  CHECK(runtime->started("t1") == 1);
  CHECK(status("t2").state == task_state::queued);
  CHECK(status("t1").state == task_state::running);
  advance(9.9);
  CHECK(runtime->started() == 1);
  advance(0.1);
  CHECK(runtime->started("t2") == 1);
  CHECK(runtime->started("t3") == 0);
  advance(10);
  CHECK(runtime->started("t3") == 1);
  advance(10);
  CHECK(runtime->max_running() == 1);
  std::vector<std::string> order;
  for (auto& c : runtime->calls())
    order.push_back(c.task_id);
  CHECK(order == std::vector<std::string>{"t1", "t2", "t3"});
  CHECK(status("t3").state == task_state::done);
  CHECK(status("t3").result->outcome == task_outcome::succeeded);
}

TEST_CASE_METHOD(registry_fixture,
                 "round-robin rotates the first agent across tasks, a "
                 "fallback does not move it",
                 "[registry]") {
  auto cfg = builtin_config();
  environment_config env;
  env.name = "team";
  env.selection = task_with("x", {"a", "b", "c"}).selection.value();
  env.selection.mode = selection_mode::round_robin;
  cfg.environments["team"] = env;
  start(cfg);
  runtime->script("a", {exits(127)}); // falls back to b at once
  std::vector<std::string> firsts;
  for (auto id : {"t1", "t2", "t3", "t4"}) {
    task_spec t;
    t.id = id;
    t.prompt = "p";
    t.environment = "team";
    submit(t);
    firsts.push_back(agents_started(id).at(0));
  }
  CHECK(firsts == std::vector<std::string>{"a", "b", "c", "a"});
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "b"});
}

TEST_CASE_METHOD(registry_fixture,
                 "control messages reach the task, status and await answer",
                 "[registry]") {
  start(builtin_config());
  runtime->script("a", {hangs()});
  submit(task_with("t1", {"a"}));
  CHECK(status("t1").state == task_state::running);
  CHECK(status("t1").agent_id == "a");
  auto ok =
    ask<bool>(reg, stop_atom::value, std::string{"t1"}, stop_mode::kill);
  REQUIRE(ok);
  CHECK(**ok);
  auto r = await("t1");
  CHECK(r.outcome == task_outcome::stopped);
  auto all = ask<std::vector<task_status>>(reg, status_atom::value);
  REQUIRE(all);
  REQUIRE((*all)->size() == 1);
  CHECK((*all)->at(0).state == task_state::done);
  // Unknown ids are errors; finished tasks refuse further control.
  auto unknown = ask<bool>(reg, retry_now_atom::value, std::string{"nope"});
  REQUIRE(unknown);
  CHECK_FALSE(*unknown);
  CHECK(unknown->error().code() ==
        static_cast<std::uint8_t>(protocol_error::unknown_task));
  auto late =
    ask<bool>(reg, stop_atom::value, std::string{"t1"}, stop_mode::cancel);
  REQUIRE(late);
  CHECK_FALSE(**late);
  // The subscriber saw the task's events, ending with escalated.
  CHECK(seen->kinds("t1").back() == event_kind::escalated);
}

TEST_CASE_METHOD(registry_fixture,
                 "a bad submit_json is rejected and the registry keeps "
                 "working",
                 "[registry]") {
  start(builtin_config());
  auto bad = ask<std::string>(reg, submit_json_atom::value,
                              std::string{R"({"id": "x", "prompt": 42})"});
  REQUIRE(bad);
  REQUIRE_FALSE(*bad);
  CHECK(bad->error().code() ==
        static_cast<std::uint8_t>(protocol_error::invalid_task));
  auto text = error_text(bad->error());
  CHECK(text.find("/prompt") != std::string::npos);
  auto broken =
    ask<std::string>(reg, submit_json_atom::value, std::string{"{not json"});
  REQUIRE(broken);
  CHECK_FALSE(*broken);
  CHECK(runtime->started() == 0);
  // A good one still runs.
  auto good =
    ask<std::string>(reg, submit_json_atom::value,
                     std::string{R"({"id": "ok", "prompt": "hello"})"});
  REQUIRE(good);
  REQUIRE(*good);
  CHECK(**good == "ok");
  CHECK(await("ok").outcome == task_outcome::succeeded);
  CHECK(agents_started("ok") == std::vector<std::string>{"default"});
  // The same id twice is refused.
  auto dup = ask<std::string>(reg, submit_json_atom::value,
                              std::string{R"({"id": "ok", "prompt": "x"})"});
  REQUIRE(dup);
  CHECK_FALSE(*dup);
}

TEST_CASE_METHOD(registry_fixture,
                 "a JSON submit names the node's own profiles", "[registry]") {
  // A profile from the node's config directory (config_set::profiles), not
  // a built-in: the node resolves it, whoever sent the task.
  auto cfg = builtin_config();
  agent_profile mine;
  mine.name = "mine";
  mine.agent_cli = "/opt/mine/agent";
  mine.args = {"--batch"};
  mine.env_passthrough = {"MINE_TOKEN"};
  mine.idle_timeout_s = 30;
  cfg.profiles.emplace("mine", mine);
  runtime->script("m", {exits(0)});
  start(cfg);
  auto ok = ask<std::string>(
    reg, submit_json_atom::value,
    std::string{R"({"id": "p1", "prompt": "go", "agent_selection":
      {"agents": [{"agent_id": "m", "profile": "mine"}]}})"});
  REQUIRE(ok);
  REQUIRE(*ok);
  CHECK(await("p1").outcome == task_outcome::succeeded);
  const runtime::attempt_spec* spec = nullptr;
  auto calls = runtime->calls(); // a copy: keep it while `spec` points in
  for (auto& c : calls)
    if (c.what == runtime::scripted_call::kind::start && c.task_id == "p1")
      spec = &c.spec;
  REQUIRE(spec != nullptr);
  REQUIRE(spec->argv.size() == 3);
  CHECK(spec->argv[0] == "/opt/mine/agent");
  CHECK(spec->argv[1] == "--batch");
  CHECK(spec->argv[2] == "go");
  // A name the node does not know is refused, naming the field.
  auto unknown = ask<std::string>(
    reg, submit_json_atom::value,
    std::string{R"({"id": "p2", "prompt": "go", "agent_selection":
      {"agents": [{"agent_id": "m", "profile": "theirs"}]}})"});
  REQUIRE(unknown);
  REQUIRE_FALSE(*unknown);
  auto text = error_text(unknown->error());
  CHECK(text.find("/agent_selection/agents/0/profile") != std::string::npos);
  CHECK(text.find("mine") != std::string::npos);
}

TEST_CASE("10,000 tasks run to completion on the threaded scheduler",
          "[registry][threaded]") {
  caf::actor_system_config cfg;
  register_protocol(cfg);
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  auto rt = std::make_shared<runtime::scripted_runtime>();
  // Every third task starts with a missing agent and falls back to `a`.
  rt->script("a", {exits(0, {"done"})});
  rt->script("bad", {exits(127)});
  registry_options opts;
  opts.config = builtin_config();
  opts.config.node.max_concurrent = 64;
  // Keep `bad` tried by every task (an open breaker would skip it).
  opts.config.node.breaker.max_failures = 1 << 30;
  opts.config.node.default_agent = agent("default");
  opts.runtimes["*"] = rt;
  opts.history_limit = 20000;
  auto reg = spawn_registry(sys, std::move(opts));
  constexpr int n = 10000;
  {
    caf::scoped_actor self{sys};
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      auto t = i % 3 == 0 ? task_with("t" + std::to_string(i), {"bad", "a"})
                          : task_with("t" + std::to_string(i), {"a"});
      self->request(reg, std::chrono::seconds(30), submit_atom::value, t)
        .receive([&](std::string& id) { ids.push_back(id); },
                 [&](caf::error& err) { FAIL(error_text(err)); });
    }
    REQUIRE(ids.size() == n);
    int checked = 0;
    for (int i = 0; i < n; ++i) {
      self
        ->request(reg, std::chrono::seconds(60), await_atom::value,
                  ids[static_cast<std::size_t>(i)])
        .receive(
          [&](task_result& r) {
            bool fell_back = i % 3 == 0;
            if (r.outcome == task_outcome::succeeded &&
                r.metadata.agent_id == "a" &&
                r.metadata.total_attempts == (fell_back ? 2 : 1) &&
                r.metadata.fallback_count == (fell_back ? 1 : 0))
              ++checked;
          },
          [&](caf::error& err) { FAIL(error_text(err)); });
    }
    CHECK(checked == n);
    CHECK(rt->started() == n + (n + 2) / 3);
    CHECK(rt->running() == 0);
    CHECK(rt->max_running() <= 64);
    self->send_exit(reg, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE_METHOD(registry_fixture,
                 "fatal failures do not feed the circuit breaker",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.breaker.max_failures = 1;
  start(cfg);
  runtime->script("a", {exits(1, {"authentication failed"})});
  runtime->script("b", {exits(0)});
  CHECK(await(submit(task_with("t1", {"a", "b"}))).outcome ==
        task_outcome::failed);
  // A bad key says nothing about the agent's health: `a` is still tried.
  submit(task_with("t2", {"a", "b"}));
  CHECK(agents_started("t2") == std::vector<std::string>{"a"});
  CHECK(seen->of(event_kind::agent_switched, "t2").empty());
}

TEST_CASE_METHOD(registry_fixture,
                 "a half-open breaker lets exactly one attempt through "
                 "across tasks, its success closes it",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.breaker.max_failures = 1;
  cfg.node.breaker.reset_timeout_s = 300;
  start(cfg);
  runtime->script("a", {exits(1)});
  runtime->script("b", {hangs()});
  auto t1 = task_with("t1", {"a", "b"});
  t1.supervisor.max_retries_per_agent = 0;
  submit(t1);
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "b"});
  advance(300);
  // The probe: `a` runs for 10 s and succeeds.
  runtime->script("a", {exits(0, {}, 10)});
  submit(task_with("t2", {"a", "b"}));
  submit(task_with("t3", {"a", "b"}));
  CHECK(agents_started("t2") == std::vector<std::string>{"a"});
  CHECK(agents_started("t3") == std::vector<std::string>{"b"});
  advance(10);
  CHECK(await("t2").outcome == task_outcome::succeeded);
  submit(task_with("t4", {"a", "b"}));
  CHECK(agents_started("t4") == std::vector<std::string>{"a"});
}

TEST_CASE_METHOD(registry_fixture, "the retry budget refills over time",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.retry_budget_capacity = 1;
  cfg.node.retry_budget_refill_per_s = 0.1; // one token per 10 s
  start(cfg);
  runtime->script("a", {exits(1)});
  auto t = task_with("t1", {"a"});
  t.supervisor.max_retries_per_agent = 2;
  t.supervisor.backoff_base_seconds = 20; // delays 20, 60
  submit(t);
  // The first failure takes the only token; 20 s later one has come back.
  advance(20);
  CHECK(seen->of(event_kind::retry_scheduled, "t1").size() == 2);
  advance(60);
  auto r = await("t1");
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.metadata.total_attempts == 3);
}

TEST_CASE_METHOD(registry_fixture,
                 "a task stopped while queued leaves the queue, the others "
                 "keep their order",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.max_concurrent = 1;
  start(cfg);
  runtime->script("a", {exits(0, {}, 10)});
  submit(task_with("t1", {"a"}));
  submit(task_with("t2", {"a"}));
  submit(task_with("t3", {"a"}));
  REQUIRE(status("t2").state == task_state::queued);
  auto ok =
    ask<bool>(reg, stop_atom::value, std::string{"t2"}, stop_mode::cancel);
  REQUIRE(ok);
  CHECK(**ok);
  CHECK(await("t2").outcome == task_outcome::stopped);
  advance(10);
  CHECK(runtime->started("t2") == 0);
  CHECK(runtime->started("t3") == 1);
  advance(10);
  CHECK(await("t3").outcome == task_outcome::succeeded);
}

TEST_CASE_METHOD(registry_fixture, "round-robin rotates per environment",
                 "[registry]") {
  auto cfg = builtin_config();
  for (auto name : {"one", "two"}) {
    environment_config env;
    env.name = name;
    env.selection = task_with("x", {"a", "b", "c"}).selection.value();
    env.selection.mode = selection_mode::round_robin;
    cfg.environments[name] = env;
  }
  start(cfg);
  std::vector<std::string> firsts;
  for (auto [id, env] : std::vector<std::pair<std::string, std::string>>{
         {"t1", "one"}, {"u1", "two"}, {"t2", "one"}, {"u2", "two"}}) {
    task_spec t;
    t.id = id;
    t.prompt = "p";
    t.environment = env;
    submit(t);
    firsts.push_back(agents_started(id).at(0));
  }
  CHECK(firsts == std::vector<std::string>{"a", "a", "b", "b"});
}

TEST_CASE_METHOD(registry_fixture,
                 "control messages for unknown tasks are answered with an "
                 "error",
                 "[registry]") {
  start(builtin_config());
  auto code = static_cast<std::uint8_t>(protocol_error::unknown_task);
  auto stop =
    ask<bool>(reg, stop_atom::value, std::string{"nope"}, stop_mode::kill);
  REQUIRE(stop);
  REQUIRE_FALSE(*stop);
  CHECK(stop->error().code() == code);
  auto fb = ask<bool>(reg, force_fallback_atom::value, std::string{"nope"});
  REQUIRE(fb);
  REQUIRE_FALSE(*fb);
  CHECK(fb->error().code() == code);
  auto st = ask<task_status>(reg, status_atom::value, std::string{"nope"});
  REQUIRE(st);
  REQUIRE_FALSE(*st);
  CHECK(st->error().code() == code);
  auto aw = ask<task_result>(reg, await_atom::value, std::string{"nope"});
  REQUIRE(aw);
  REQUIRE_FALSE(*aw);
  CHECK(aw->error().code() == code);
}

TEST_CASE_METHOD(registry_fixture,
                 "a typed task from outside is validated like a task file",
                 "[registry]") {
  start(builtin_config());
  auto refused = [&](task_spec t, const std::string& path) {
    auto id = ask<std::string>(reg, submit_atom::value, std::move(t));
    REQUIRE(id);
    REQUIRE_FALSE(*id);
    CHECK(id->error().code() ==
          static_cast<std::uint8_t>(protocol_error::invalid_task));
    auto text = error_text(id->error());
    CHECK(text.find("submitted task") != std::string::npos);
    CHECK(text.find(path) != std::string::npos);
  };
  // The id becomes a directory under the attempt root.
  refused(task_with("../../etc", {"a"}), "/id");
  refused(task_with("/tmp/x", {"a"}), "/id");
  auto t = task_with("t1", {"a"});
  t.prompt.clear();
  refused(t, "/prompt");
  t = task_with("t1", {"a"});
  t.supervisor.stop_grace_s = 1e300; // would overflow the grace in ms
  refused(t, "/supervisor/stop_grace_s");
  t = task_with("t1", {"a"});
  t.supervisor.max_total_attempts = 0;
  refused(t, "/supervisor/max_total_attempts");
  t = task_with("t1", {"a"});
  t.supervisor.deadline_s = std::nan("");
  refused(t, "/supervisor/deadline_s");
  t = task_with("t1", {"a"});
  t.selection->agents[0].agent_cli.clear();
  refused(t, "/agent_selection/agents/0/agent_cli");
  t = task_with("t1", {"a", "b"});
  t.selection->agents[1].agent_id = "a";
  refused(t, "/agent_selection/agents/1/agent_id");
  t = task_with("t1", {"a"});
  t.env["A=B"] = "x";
  refused(t, "/env");
  t = task_with("t1", {"a"});
  t.workdir = "relative";
  refused(t, "/workdir");
  CHECK(runtime->started() == 0);
  // Nothing was lost: a good task still runs.
  submit(task_with("t1", {"a"}));
  CHECK(await("t1").outcome == task_outcome::succeeded);
}

TEST_CASE_METHOD(registry_fixture,
                 "an escalate from anyone but the task's supervisor is ignored",
                 "[registry]") {
  start(builtin_config());
  runtime->script("a", {hangs()});
  submit(task_with("t1", {"a"}));
  task_result forged;
  forged.task_id = "t1";
  forged.outcome = task_outcome::succeeded;
  forged.exit_code = 0;
  caf::anon_send(reg, escalate_atom::value, forged);
  caf::anon_send(reg, release_atom::value, std::string{"t1"});
  run();
  CHECK(status("t1").state == task_state::running);
  // The real end still arrives and counts.
  auto ok =
    ask<bool>(reg, stop_atom::value, std::string{"t1"}, stop_mode::kill);
  REQUIRE(ok);
  CHECK(**ok);
  CHECK(await("t1").outcome == task_outcome::stopped);
}

TEST_CASE_METHOD(registry_fixture,
                 "a registry that ends takes its tasks and their attempts "
                 "with it",
                 "[registry]") {
  start(builtin_config());
  runtime->script("a", {hangs()});
  submit(task_with("t1", {"a"}));
  submit(task_with("t2", {"a"}));
  REQUIRE(runtime->running() == 2);
  caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
  run();
  CHECK(runtime->running() == 0);
  std::size_t kills = 0;
  for (auto& c : runtime->calls())
    if (c.what == runtime::scripted_call::kind::kill)
      ++kills;
  CHECK(kills == 2);
}

TEST_CASE_METHOD(registry_fixture,
                 "forget removes a finished task, refuses a running one and "
                 "names an unknown one",
                 "[registry]") {
  start(builtin_config());
  runtime->script("a", {exits(0)});
  runtime->script("b", {hangs()});
  CHECK(await(submit(task_with("done", {"a"}))).outcome ==
        task_outcome::succeeded);
  submit(task_with("running", {"b"}));
  // A running task is not forgotten: nothing changes.
  auto refused = ask<bool>(reg, forget_atom::value, std::string{"running"});
  REQUIRE(refused);
  REQUIRE(*refused);
  CHECK_FALSE(**refused);
  CHECK(status("running").state == task_state::running);
  // A finished one is: its status goes, and its id is free again.
  auto forgot = ask<bool>(reg, forget_atom::value, std::string{"done"});
  REQUIRE(forgot);
  REQUIRE(*forgot);
  CHECK(**forgot);
  auto gone = ask<task_status>(reg, status_atom::value, std::string{"done"});
  REQUIRE(gone);
  REQUIRE_FALSE(*gone);
  CHECK(gone->error().code() ==
        static_cast<std::uint8_t>(protocol_error::unknown_task));
  auto all = ask<std::vector<task_status>>(reg, status_atom::value);
  REQUIRE(all);
  REQUIRE(*all);
  for (auto& s : **all)
    CHECK(s.task_id != "done");
  runtime->script("a", {exits(0)});
  CHECK(await(submit(task_with("done", {"a"}))).outcome ==
        task_outcome::succeeded);
  // A task the node never had is an error naming it.
  auto unknown = ask<bool>(reg, forget_atom::value, std::string{"nope"});
  REQUIRE(unknown);
  REQUIRE_FALSE(*unknown);
  CHECK_THAT(error_text(unknown->error()), Catch::Contains("nope"));
}

namespace {

/// A rule that classifies a plan's usage limit as `quota_exhausted`.
std::vector<classifier_rule> quota_rules() {
  classifier_rule r;
  r.id = "quota";
  r.cls = error_class::quota_exhausted;
  r.patterns = {"usage limit reached"};
  return {r};
}

} // namespace

TEST_CASE_METHOD(registry_fixture,
                 "a used-up quota closes the agent's account for every task "
                 "until the reset: others move on at once, without trying it",
                 "[registry][quota]") {
  auto cfg = builtin_config();
  cfg.supervisor.quota_wait_s = 3600;
  start(cfg);
  runtime->script("a", {exits(1, {"usage limit reached"})});
  runtime->script("b", {exits(0, {}, 5)});
  auto t1 = task_with("t1", {"a", "b"});
  t1.classifier_rules = quota_rules();
  submit(t1);
  CHECK(agents_started("t1") == std::vector<std::string>{"a", "b"});
  // No retry was spent on the quota.
  CHECK(seen->of(event_kind::retry_scheduled, "t1").empty());
  // t2 never starts `a` while its account is closed.
  submit(task_with("t2", {"a", "b"}));
  CHECK(agents_started("t2") == std::vector<std::string>{"b"});
  auto switched = seen->of(event_kind::agent_switched, "t2");
  REQUIRE(switched.size() == 1);
  CHECK(switched.front().json().find("\"cause\":\"quota\"") !=
        std::string::npos);
  CHECK(switched.front().json().find("quota of a used up") !=
        std::string::npos);
  // The quota shows in the node's health.
  auto health = ask<node_health>(reg, health_atom::value);
  REQUIRE(health);
  REQUIRE(*health);
  REQUIRE((*health)->quotas.size() == 1);
  CHECK((*health)->quotas.front().account == "a");
  // After the reset `a` is tried again.
  advance(3600);
  runtime->script("a", {exits(0)});
  submit(task_with("t3", {"a", "b"}));
  CHECK(agents_started("t3") == std::vector<std::string>{"a"});
}

TEST_CASE_METHOD(registry_fixture,
                 "the last agent's used-up quota parks the task, shown as "
                 "quota_wait, until the reset",
                 "[registry][quota]") {
  auto cfg = builtin_config();
  cfg.supervisor.quota_wait_s = 600;
  start(cfg);
  runtime->script("a", {exits(1, {"usage limit reached"}), exits(0)});
  auto t1 = task_with("t1", {"a"});
  t1.classifier_rules = quota_rules();
  submit(t1);
  auto s = status("t1");
  CHECK(s.state == task_state::quota_wait);
  CHECK(s.resume_at > 0);
  CHECK(s.waiting_for.find("quota reset of a at ") == 0);
  CHECK(s.waiting_for.find("(in 10m)") != std::string::npos);
  auto waits = seen->of(event_kind::step, "t1");
  REQUIRE_FALSE(waits.empty());
  CHECK(waits.back().json().find("\"step\":\"quota_wait\"") !=
        std::string::npos);
  // A second task of the same account waits too, without a slot.
  submit(task_with("t2", {"a"}));
  CHECK(status("t2").state == task_state::quota_wait);
  CHECK(runtime->started("t2") == 0);
  advance(599);
  CHECK(runtime->started("t1") == 1);
  advance(1);
  CHECK(runtime->started("t1") == 2);
  CHECK(await("t1").outcome == task_outcome::succeeded);
  CHECK(await("t1").metadata.total_retries == 0);
}

TEST_CASE_METHOD(registry_fixture,
                 "pause holds a task's next attempt until resume, a queued "
                 "task paused gives up its place",
                 "[registry][pause]") {
  auto cfg = builtin_config();
  cfg.node.max_concurrent = 1;
  start(cfg);
  runtime->script("a", {exits(1, {}, 10), exits(0)});
  auto t1 = task_with("t1", {"a"});
  t1.supervisor.backoff_base_seconds = 5;
  submit(t1);
  submit(task_with("t2", {"a"}));
  REQUIRE(status("t2").state == task_state::queued);
  auto pause = [&](const char* id) {
    auto ok = ask<bool>(reg, pause_atom::value, std::string{id});
    REQUIRE(ok);
    return **ok;
  };
  auto resume = [&](const char* id) {
    auto ok = ask<bool>(reg, resume_atom::value, std::string{id});
    REQUIRE(ok);
    return **ok;
  };
  CHECK(pause("t1")); // while its attempt runs
  CHECK(pause("t2")); // while queued
  CHECK_FALSE(pause("t2"));
  CHECK(status("t2").state == task_state::paused);
  advance(10); // t1's attempt fails; its retry would be due 5 s later
  advance(60);
  CHECK(runtime->started("t1") == 1);
  CHECK(runtime->started("t2") == 0);
  CHECK(status("t1").state == task_state::paused);
  CHECK(resume("t1"));
  CHECK_FALSE(resume("t1"));
  run();
  CHECK(runtime->started("t1") == 2);
  CHECK(await("t1").outcome == task_outcome::succeeded);
  CHECK(resume("t2"));
  run();
  CHECK(runtime->started("t2") == 1);
  // A finished task cannot be paused.
  CHECK_FALSE(pause("t1"));
}

TEST_CASE_METHOD(registry_fixture,
                 "retention: past the count the oldest finished task leaves "
                 "status, which then says when and why",
                 "[registry]") {
  history_limit = 2;
  start(builtin_config());
  runtime->script("a", {exits(0)});
  for (auto id : {"t1", "t2", "t3"})
    CHECK(await(submit(task_with(id, {"a"}))).outcome ==
          task_outcome::succeeded);
  auto ids = listed_ids();
  CHECK(ids == std::vector<std::string>{"t2", "t3"});
  auto gone = ask<task_status>(reg, status_atom::value, std::string{"t1"});
  REQUIRE(gone);
  REQUIRE_FALSE(*gone);
  CHECK(gone->error().code() ==
        static_cast<std::uint8_t>(protocol_error::unknown_task));
  auto text = error_text(gone->error());
  CHECK_THAT(text, Catch::StartsWith("task 't1' expired at 20"));
  CHECK_THAT(text, Catch::EndsWith(" UTC: the node keeps the 2 most recent "
                                   "finished tasks (--retain-tasks)"));
  // Its id is free again; an id never seen is simply unknown.
  submit(task_with("t1", {"a"}));
  CHECK(await("t1").outcome == task_outcome::succeeded);
  auto never = ask<task_status>(reg, status_atom::value, std::string{"t9"});
  REQUIRE(never);
  REQUIRE_FALSE(*never);
  CHECK(error_text(never->error()) == "no task with id 't9'");
}

TEST_CASE_METHOD(registry_fixture,
                 "retention: a restored task past the age is not kept, the "
                 "rest oldest first as they finished",
                 "[registry]") {
  history_max_age_s = 7 * 86400;
  using namespace std::chrono;
  auto now = duration<double>(system_clock::now().time_since_epoch()).count();
  // In submission order; "late" finished before "early".
  restored.tasks.push_back(finished_journaled("old", now - 8 * 86400));
  restored.tasks.push_back(finished_journaled("early", now - 60));
  restored.tasks.push_back(finished_journaled("late", now - 120));
  start(builtin_config());
  auto ids = listed_ids();
  CHECK(ids == std::vector<std::string>{"late", "early"});
  auto old = ask<task_status>(reg, status_atom::value, std::string{"old"});
  REQUIRE(old);
  REQUIRE_FALSE(*old);
  CHECK_THAT(error_text(old->error()),
             Catch::EndsWith(" UTC: the node keeps finished tasks for 7 days "
                             "(--retain-days)"));
}

namespace {

/// The ids of a page, in its order.
std::vector<std::string> ids_of(const status_page& page) {
  std::vector<std::string> out;
  for (auto& t : page.tasks)
    out.push_back(t.task_id);
  return out;
}

} // namespace

TEST_CASE_METHOD(registry_fixture,
                 "status pages: ascending ids after a cursor, filtered by "
                 "state, outcome and agent on the node, with the counts",
                 "[registry]") {
  auto cfg = builtin_config();
  cfg.node.max_concurrent = 4;
  start(cfg);
  runtime->script("ok", {exits(0)});
  runtime->script("bad", {exits(1)});
  runtime->script("slow", {hangs()});
  auto failing = task_with("d2", {"bad"});
  failing.supervisor.max_retries_per_agent = 0;
  submit(failing);
  submit(task_with("d1", {"ok"}));
  CHECK(await("d1").outcome == task_outcome::succeeded);
  CHECK(await("d2").outcome == task_outcome::failed);
  submit(task_with("r2", {"slow"}));
  submit(task_with("r1", {"slow"}));
  REQUIRE(status("r1").state == task_state::running);
  REQUIRE(status("r2").state == task_state::running);
  auto page = [&](status_query q) {
    auto answer = ask<status_page>(reg, status_atom::value, q);
    REQUIRE(answer);
    REQUIRE(*answer);
    return std::move(**answer);
  };
  auto bit = [](auto x) { return 1u << static_cast<unsigned>(x); };

  // The first page: in id order, an active task with its supervisor's
  // state, and how many follow.
  auto first = page({3, "", 0, 0, ""});
  CHECK(ids_of(first) == std::vector<std::string>{"d1", "d2", "r1"});
  CHECK(first.tasks[2].state == task_state::running);
  CHECK(first.tasks[2].agent_id == "slow");
  CHECK(first.total == 4);
  CHECK(first.matched == 4);
  CHECK(first.more == 1);
  // The next one, from the last id shown.
  auto next = page({3, "r1", 0, 0, ""});
  CHECK(ids_of(next) == std::vector<std::string>{"r2"});
  CHECK(next.matched == 4);
  CHECK(next.more == 0);
  // No limit: all of them.
  CHECK(ids_of(page({})).size() == 4);

  // Filters, each counted against the node's total.
  auto done = page({0, "", bit(task_state::done), 0, ""});
  CHECK(ids_of(done) == std::vector<std::string>{"d1", "d2"});
  CHECK(done.total == 4);
  CHECK(done.matched == 2);
  CHECK(ids_of(page({0, "", 0, bit(task_outcome::failed), ""})) ==
        std::vector<std::string>{"d2"});
  auto running = page({1, "", bit(task_state::running), 0, ""});
  CHECK(ids_of(running) == std::vector<std::string>{"r1"});
  CHECK(running.matched == 2);
  CHECK(running.more == 1);
  CHECK(ids_of(page({1, "r1", bit(task_state::running), 0, ""})) ==
        std::vector<std::string>{"r2"});
  CHECK(ids_of(page({0, "", 0, 0, "slow"})) ==
        std::vector<std::string>{"r1", "r2"});
  CHECK(ids_of(page({0, "", 0, 0, "ok"})) == std::vector<std::string>{"d1"});
  auto none = page({0, "", bit(task_state::backoff), 0, ""});
  CHECK(none.tasks.empty());
  CHECK(none.matched == 0);
  CHECK(none.total == 4);
  // Past the last id: an empty page.
  CHECK(page({10, "zz", 0, 0, ""}).tasks.empty());
}

TEST_CASE_METHOD(registry_fixture,
                 "retention: a node started on the journaled expired tasks "
                 "still says when and why they expired, bad lines skipped",
                 "[registry]") {
  restored.node_state["expired"] =
    "old\t1800000000.000\tthe node keeps the 1 most recent finished tasks "
    "(--retain-tasks)\nbad line\n\tx\ty\nz\tnot a time\tw\n";
  start(builtin_config());
  auto gone = ask<task_status>(reg, status_atom::value, std::string{"old"});
  REQUIRE(gone);
  REQUIRE_FALSE(*gone);
  CHECK(error_text(gone->error()) ==
        "task 'old' expired at 2027-01-15 08:00:00 UTC: the node keeps the 1 "
        "most recent finished tasks (--retain-tasks)");
  auto z = ask<task_status>(reg, status_atom::value, std::string{"z"});
  REQUIRE(z);
  REQUIRE_FALSE(*z);
  CHECK(error_text(z->error()) == "no task with id 'z'");
}

TEST_CASE_METHOD(registry_fixture,
                 "retention: an expiry is journaled a second later, with "
                 "those before it",
                 "[registry]") {
  // A journal that keeps the "expired" states it is sent, numbers the
  // tasks, takes their inputs and anything else without a word.
  auto saved = std::make_shared<std::vector<std::string>>();
  auto journal = keep(sys().spawn([saved](caf::event_based_actor* self) {
    self->set_default_handler(
      [](caf::scheduled_actor*,
         caf::message_view&) -> caf::result<caf::message> {
        return caf::message{};
      });
    auto seq = std::make_shared<std::int64_t>(100);
    return caf::behavior{
      [=](jstate_atom, const std::string& key, const std::string& bytes) {
        if (key == "expired")
          saved->push_back(bytes);
      },
      [=](jtask_atom, const std::string&, const std::string&, double, bool) {
        return ++*seq;
      },
      [=](jinput_atom, std::int64_t, std::int64_t, const std::string&, bool) {
        return true;
      },
    };
  }));
  journal_override = caf::actor_cast<journal_actor>(journal);
  history_limit = 1;
  restored.tasks.push_back(finished_journaled("old", 1.8e9));
  restored.tasks.push_back(finished_journaled("new", 1.8e9 + 60));
  start(builtin_config());
  // "old" expired at the start: journaled once its second has passed.
  CHECK(saved->empty());
  advance(1);
  REQUIRE(saved->size() == 1);
  CHECK_THAT(saved->back(),
             Catch::StartsWith("old\t") &&
               Catch::EndsWith("\tthe node keeps the 1 most recent finished "
                               "tasks (--retain-tasks)\n"));
  // The next expiry writes both, oldest first.
  runtime->script("a", {exits(0)});
  CHECK(await(submit(task_with("next", {"a"}))).outcome ==
        task_outcome::succeeded);
  CHECK(saved->size() == 1);
  advance(1);
  REQUIRE(saved->size() == 2);
  auto both = saved->back();
  CHECK(both.rfind("old\t", 0) == 0);
  CHECK(both.find("\nnew\t") != std::string::npos);
}

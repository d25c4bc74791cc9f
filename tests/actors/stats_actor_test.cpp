// The statistics actor on a registry: live events, the histories of tasks
// that finished before it started, and the registry's own figures (breakers,
// budget, slots) in the metrics; on simulated time.

#include "tasksup/actors/stats_actor.hpp"

#include "tasksup/actors/registry_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <string>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct stats_fixture : fixture {
  registry_actor reg;

  void start(config_set cfg) {
    registry_options opts;
    opts.config = std::move(cfg);
    opts.config.node.default_agent = agent("default");
    opts.runtimes["*"] = runtime;
    opts.seed = 7;
    opts.attempt_root = "/tmp/tasksup-actor-tests";
    reg = keep(spawn_registry(sys(), std::move(opts)));
    run();
  }

  stats_actor stats() {
    auto s = keep(spawn_stats(sys(), reg));
    run();
    return s;
  }

  void submit_and_finish(task_spec t) {
    auto id = ask<std::string>(reg, submit_atom::value, std::move(t));
    REQUIRE(id);
    REQUIRE(*id);
    advance(60);
  }

  template<class... Ts>
  std::string text(const stats_actor& dest, Ts... xs) {
    auto out = std::make_shared<std::optional<caf::expected<std::string>>>();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
        .then([=](std::string& x) { *out = std::move(x); },
              [=](caf::error& err) { *out = std::move(err); });
    });
    run();
    REQUIRE(*out);
    REQUIRE(**out);
    return ***out;
  }
};

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

task_spec retry_then_fallback(const std::string& id) {
  auto t = task_with(id, {"a", "b"});
  t.supervisor.max_retries_per_agent = 1;
  return t;
}

} // namespace

TEST_CASE_METHOD(stats_fixture,
                 "metrics count live attempts and carry the registry's "
                 "breakers, budget and slots",
                 "[stats]") {
  auto cfg = builtin_config();
  cfg.node.breaker.max_failures = 2;
  cfg.node.retry_budget_capacity = 5;
  cfg.node.retry_budget_refill_per_s = 0;
  cfg.node.max_concurrent = 3;
  start(cfg);
  auto s = stats();
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(0)});
  submit_and_finish(retry_then_fallback("t1"));

  auto m = text(s, metrics_atom::value);
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="a",class="retryable",decision="retry"} 1)"));
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="a",class="retryable",decision="fallback"} 1)"));
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="b",class="none",decision="succeeded"} 1)"));
  CHECK(has_line(m, R"(tasksup_tasks{state="done"} 1)"));
  // Two consecutive failures of `a` opened its breaker; one retry token
  // was taken; no slot is held any more.
  CHECK(
    has_line(m, R"(tasksup_agent_breaker_state{agent="a",state="open"} 1)"));
  // A healthy agent has no breaker state to report.
  CHECK(m.find(R"(tasksup_agent_breaker_state{agent="b")") ==
        std::string::npos);
  CHECK(has_line(m, "tasksup_retry_budget_tokens 4"));
  CHECK(has_line(m, "tasksup_retry_budget_capacity 5"));
  CHECK(has_line(m, "tasksup_attempt_slots 3"));
  CHECK(has_line(m, "tasksup_attempt_slots_in_use 0"));

  auto list = boost::json::parse(text(s, view_atom::value));
  REQUIRE(list.at("tasks").as_array().size() == 1);
  CHECK(list.at("tasks").at(0).at("task_id").as_string() == "t1");
  CHECK(list.at("tasks").at(0).at("submitted_ts").is_double());
  auto one = boost::json::parse(text(s, view_atom::value, std::string{"t1"}));
  CHECK(one.at("task").at("outcome").as_string() == "succeeded");
  CHECK(one.at("events").as_array().size() >= 8);
}

TEST_CASE_METHOD(stats_fixture,
                 "tasks that finished before the statistics started are "
                 "replayed from the registry's history, once",
                 "[stats]") {
  start(builtin_config());
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(0)});
  submit_and_finish(retry_then_fallback("early"));
  auto s = stats();
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(0)});
  submit_and_finish(retry_then_fallback("late"));

  auto m = text(s, metrics_atom::value);
  CHECK(has_line(m, "tasksup_tasks_submitted_total 2"));
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="b",class="none",decision="succeeded"} 2)"));
  auto agents = boost::json::parse(text(s, agents_atom::value, 0.0));
  auto& all = agents.at("agents").as_array();
  REQUIRE(all.size() == 2);
  CHECK(all.at(0).at("agent_id").as_string() == "a");
  CHECK(all.at(0).at("attempts").as_int64() == 4);
  CHECK(all.at(1).at("success_rate").as_double() == 1.0);
  CHECK(agents.at("fallback_order").at(0).at("agent_id").as_string() == "b");
}

TEST_CASE_METHOD(stats_fixture,
                 "a task still going when the statistics start (resumed "
                 "after a restart) counts its earlier attempts, once",
                 "[stats]") {
  start(builtin_config());
  runtime->script("a", {exits(1), exits(1), exits(0)});
  auto t = task_with("resumed", {"a"});
  t.supervisor.backoff_base_seconds = 100;
  auto id = ask<std::string>(reg, submit_atom::value, std::move(t));
  REQUIRE(id);
  // The first attempt failed; the task waits 100 s to retry.
  advance(1);
  auto s = stats();
  // The rest happens live: a second failure (after 100 s), then success
  // (after 300 s more).
  advance(150);
  advance(400);
  auto agents = boost::json::parse(text(s, agents_atom::value, 0.0));
  auto& all = agents.at("agents").as_array();
  REQUIRE(all.size() == 1);
  CHECK(all.at(0).at("agent_id").as_string() == "a");
  CHECK(all.at(0).at("attempts").as_int64() == 3);
  auto m = text(s, metrics_atom::value);
  CHECK(has_line(m, "tasksup_tasks_submitted_total 1"));
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="a",class="retryable",decision="retry"} 2)"));
  CHECK(has_line(
    m,
    R"(tasksup_attempts_total{agent="a",class="none",decision="succeeded"} 1)"));
}

TEST_CASE_METHOD(stats_fixture, "a view of an unknown task is an error",
                 "[stats]") {
  start(builtin_config());
  auto s = stats();
  auto out = std::make_shared<std::optional<caf::error>>();
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(s, caf::infinite, view_atom::value, std::string{"nope"})
      .then([](std::string&) {}, [=](caf::error& err) { *out = err; });
  });
  run();
  REQUIRE(*out);
  CHECK(error_text(**out).find("nope") != std::string::npos);
}

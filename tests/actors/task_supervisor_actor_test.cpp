// The task supervisor on its own, with a plain actor as its parent (as an
// embedding application would spawn it): the decision table and the user's
// controls (docs/BEHAVIOUR.md) on simulated time.

#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include <caf/typed_event_based_actor.hpp>

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct supervisor_fixture : fixture {
  std::shared_ptr<collected> seen = std::make_shared<collected>();
  caf::actor parent = collector(seen);
  task_supervisor_actor sup;

  bool event_batches = false;
  /// Asked instead of a classifier of the supervisor's own, when set.
  classifier_actor classifier;

  task_supervisor_actor
  spawn(task_spec t, std::shared_ptr<runtime::container_runtime> rt = nullptr,
        std::string attempt_root = "/tmp/tasksup-actor-tests") {
    supervisor_options opts;
    opts.event_batches = event_batches;
    opts.classifier = classifier;
    opts.task = std::move(t);
    opts.default_agent = agent("default");
    opts.runtime = rt ? std::move(rt) : runtime;
    opts.seed = 42;
    opts.attempt_root = std::move(attempt_root);
    return spawn_task_supervisor(
      sys(), caf::actor_cast<task_parent_actor>(parent), std::move(opts));
  }

  void start(task_spec t) {
    sup = spawn(std::move(t));
    run();
  }

  const task_result& result() {
    REQUIRE(seen->results.size() == 1);
    return seen->results.front();
  }

  std::vector<double> delays(const std::string& task_id = {}) {
    std::vector<double> out;
    for (auto& ev : seen->of(event_kind::retry_scheduled, task_id))
      out.push_back(boost::json::parse(ev.json())
                      .as_object()
                      .at("delay_s")
                      .to_number<double>());
    return out;
  }

  boost::json::object json_of(const event& ev) {
    return boost::json::parse(ev.json()).as_object();
  }
};

} // namespace

TEST_CASE_METHOD(supervisor_fixture, "success on the first attempt",
                 "[task_supervisor]") {
  runtime->script("a", {exits(0, {"all good"})});
  start(task_with("t1", {"a", "b"}));
  auto& r = result();
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(r.error);
  CHECK(r.metadata.agent_id == "a");
  CHECK(r.metadata.agent_used == "a-cli");
  CHECK(r.metadata.total_attempts == 1);
  CHECK(r.metadata.retry_count == 0);
  CHECK(r.metadata.fallback_count == 0);
  CHECK(seen->kinds() ==
        std::vector<event_kind>{event_kind::task_submitted,
                                event_kind::attempt_started, event_kind::log,
                                event_kind::attempt_exited,
                                event_kind::task_done, event_kind::escalated});
  // W3C sizes; one trace per task, a new span for the attempt.
  auto& first = seen->events.front();
  CHECK(first.trace_id().size() == 32);
  CHECK(first.span_id().size() == 16);
  auto started = seen->of(event_kind::attempt_started).at(0);
  CHECK(started.trace_id() == first.trace_id());
  CHECK(started.span_id() != first.span_id());
  CHECK(started.attempt == 1);
  auto obj = json_of(started);
  CHECK(obj.at("agent_cli").as_string() == "a-cli");
  CHECK(std::string{obj.at("container_id").as_string().c_str()}.rfind(
          "scripted-", 0) == 0);
  // The prompt is the last argument.
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].spec.argv == std::vector<std::string>{"a-cli", "do it"});
  // The runtime is given the attempt's trace context, which it passes on to
  // the agent (TRACEPARENT and friends).
  CHECK(calls[0].spec.trace_id == started.trace_id());
  CHECK(calls[0].spec.span_id == started.span_id());
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a parent that takes batches gets a failed attempt's events "
                 "in one message, in the same order, and the end before the "
                 "result",
                 "[task_supervisor]") {
  // Each run its own agent: the scripted runtime keeps an agent's script.
  auto events_of_a_flaky_run = [this](bool batches, const std::string& a) {
    seen = std::make_shared<collected>();
    parent = collector(seen);
    event_batches = batches;
    runtime->script(a, {exits(1, {"transient glitch"}), exits(0, {"ok"})});
    auto t = task_with("t-" + a, {a});
    t.supervisor.backoff_base_seconds = 0;
    start(std::move(t));
    REQUIRE(seen->results.size() == 1);
    CHECK(seen->results[0].outcome == task_outcome::succeeded);
    return seen;
  };
  auto single = events_of_a_flaky_run(false, "a");
  auto batched = events_of_a_flaky_run(true, "b");
  // An embedding application's parent gets one event per message.
  CHECK(std::all_of(single->per_message.begin(), single->per_message.end(),
                    [](std::size_t n) { return n == 1; }));
  // The same events in the same order either way.
  CHECK(batched->kinds() == single->kinds());
  CHECK(batched->kinds() ==
        std::vector<event_kind>{
          event_kind::task_submitted, event_kind::attempt_started,
          event_kind::log, event_kind::attempt_exited, event_kind::classified,
          event_kind::retry_scheduled, event_kind::attempt_started,
          event_kind::log, event_kind::attempt_exited, event_kind::task_done,
          event_kind::escalated});
  // The failed attempt's end, class and retry went in one message: the
  // supervisor held them while it asked the classifier and the backoff
  // actor.
  CHECK(std::count(batched->per_message.begin(), batched->per_message.end(),
                   std::size_t{3}) == 1);
  CHECK(batched->per_message.size() < single->per_message.size());
  // task_done arrived before the result, escalated after it, as without
  // batches.
  auto kinds = batched->kinds();
  auto done_at = std::find(kinds.begin(), kinds.end(), event_kind::task_done) -
                 kinds.begin();
  REQUIRE(batched->events_before_result.size() == 1);
  CHECK(batched->events_before_result[0] ==
        static_cast<std::size_t>(done_at) + 1);
  CHECK(single->events_before_result == batched->events_before_result);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a supervisor told to exit sends the events it holds first",
                 "[task_supervisor]") {
  // A classifier that never answers: the failed attempt's end is held
  // while the supervisor waits for it, and the node shuts down meanwhile.
  auto asked = std::make_shared<
    std::vector<caf::typed_response_promise<classification>>>();
  classifier = keep(sys().spawn(
    [asked](classifier_actor::pointer self) -> classifier_actor::behavior_type {
      return {
        [=](classify_atom, const classify_request&) {
          asked->push_back(self->make_response_promise<classification>());
          return asked->back();
        },
        [](set_rules_atom, const std::vector<classifier_rule>&) {
          return true;
        },
        [](set_rules_atom, const std::string&,
           const std::vector<classifier_rule>&) { return true; },
        [](drop_rules_atom, const std::string&) {},
      };
    }));
  event_batches = true;
  runtime->script("a", {exits(1, {"transient glitch"})});
  start(task_with("t1", {"a"}));
  REQUIRE(asked->size() == 1);
  CHECK(seen->of(event_kind::attempt_exited).empty()); // held
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  CHECK(seen->of(event_kind::attempt_exited).size() == 1);
  CHECK(seen->kinds() == std::vector<event_kind>{event_kind::task_submitted,
                                                 event_kind::attempt_started,
                                                 event_kind::log,
                                                 event_kind::attempt_exited});
}

TEST_CASE_METHOD(supervisor_fixture,
                 "retryable failures are retried three times after 5, 15 and "
                 "45 s of simulated time",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1, {"transient glitch"})});
  start(task_with("t1", {"a"}));
  CHECK(runtime->started() == 1);
  for (auto [delay, before] :
       std::vector<std::pair<double, std::size_t>>{{5, 1}, {15, 2}, {45, 3}}) {
    advance(delay - 0.001);
    CHECK(runtime->started() == before); // nothing starts early
    advance(0.001);
    CHECK(runtime->started() == before + 1); // and it starts on time
  }
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.exit_code == 1);
  CHECK(r.metadata.total_attempts == 4);
  CHECK(r.metadata.retry_count == 3);
  CHECK(delays() == std::vector<double>{5, 15, 45});
  auto sched = seen->of(event_kind::retry_scheduled);
  REQUIRE(sched.size() == 3);
  auto o = json_of(sched[2]);
  CHECK(o.at("retry_count").as_int64() == 3);
  CHECK(o.at("agent").as_string() == "a");
  auto cls = json_of(seen->of(event_kind::classified).at(0));
  CHECK(cls.at("class").as_string() == "retryable");
}

TEST_CASE_METHOD(supervisor_fixture,
                 "rate limits back off 60, 120, 300 s, a retry-after hint "
                 "sets the delay",
                 "[task_supervisor]") {
  SECTION("the long schedule") {
    runtime->script("a", {exits(1, {"Error: rate limit exceeded"})});
    start(task_with("t1", {"a"}));
    advance(59.9);
    CHECK(runtime->started() == 1);
    advance(0.1);
    CHECK(runtime->started() == 2);
    drain();
    CHECK(delays() == std::vector<double>{60, 120, 300});
    auto cls = json_of(seen->of(event_kind::classified).at(0));
    CHECK(cls.at("class").as_string() == "rate_limit");
    CHECK(cls.at("line").as_string() == "Error: rate limit exceeded");
  }
  SECTION("the hint") {
    runtime->script(
      "a",
      {exits(1, {"HTTP 429 Too Many Requests", "Retry-After: 20"}), exits(0)});
    start(task_with("t1", {"a"}));
    advance(19.9);
    CHECK(runtime->started() == 1);
    advance(0.1);
    CHECK(runtime->started() == 2);
    CHECK(delays() == std::vector<double>{20});
    CHECK(result().outcome == task_outcome::succeeded);
    auto cls = json_of(seen->of(event_kind::classified).at(0));
    CHECK(cls.at("retry_after_s").to_number<double>() == 20);
  }
}

TEST_CASE_METHOD(supervisor_fixture,
                 "fatal ends at once: no retry, no fallback",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1, {"authentication failed"})});
  start(task_with("t1", {"a", "b"}));
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.metadata.total_attempts == 1);
  CHECK(seen->of(event_kind::retry_scheduled).empty());
  CHECK(seen->of(event_kind::agent_switched).empty());
  CHECK(runtime->started() == 1);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "an agent failure switches to the next agent immediately",
                 "[task_supervisor]") {
  runtime->script("a", {exits(127, {"a-cli: command not found"})});
  runtime->script("b", {exits(0)});
  start(task_with("t1", {"a", "b"}));
  // No simulated time passed.
  auto& r = result();
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.metadata.agent_id == "b");
  CHECK(r.metadata.fallback_count == 1);
  auto sw = seen->of(event_kind::agent_switched);
  REQUIRE(sw.size() == 1);
  auto o = json_of(sw[0]);
  CHECK(o.at("from").as_string() == "a");
  CHECK(o.at("to").as_string() == "b");
}

TEST_CASE_METHOD(supervisor_fixture,
                 "the chain [a, b, c] exhausted, with its events in order",
                 "[task_supervisor]") {
  for (auto id : {"a", "b", "c"})
    runtime->script(id, {exits(2, {"boom"})});
  start(task_with("t1", {"a", "b", "c"}));
  drain();
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.exit_code == 2);
  CHECK(r.error);
  CHECK(r.metadata.agent_id == "c");
  CHECK(r.metadata.agent_used == "c-cli");
  CHECK(r.metadata.retry_count == 3);
  CHECK(r.metadata.total_attempts == 12);
  CHECK(r.metadata.fallback_count == 2);
  // Per agent: 4 attempts, 3 retries; then a switch.
  std::vector<event_kind> want{event_kind::task_submitted};
  for (int agent = 0; agent < 3; ++agent) {
    for (int i = 0; i < 4; ++i) {
      want.insert(want.end(),
                  {event_kind::attempt_started, event_kind::log,
                   event_kind::attempt_exited, event_kind::classified});
      if (i < 3)
        want.push_back(event_kind::retry_scheduled);
    }
    if (agent < 2)
      want.push_back(event_kind::agent_switched);
  }
  want.insert(want.end(), {event_kind::task_done, event_kind::escalated});
  CHECK(seen->kinds() == want);
  auto sw = seen->of(event_kind::agent_switched);
  REQUIRE(sw.size() == 2);
  CHECK(json_of(sw[1]).at("from").as_string() == "b");
  CHECK(json_of(sw[1]).at("to").as_string() == "c");
  // Attempt numbers run 1..12 and every attempt has its own span.
  auto started = seen->of(event_kind::attempt_started);
  REQUIRE(started.size() == 12);
  for (int i = 0; i < 12; ++i)
    CHECK(started[static_cast<std::size_t>(i)].attempt == i + 1);
  CHECK(started[0].span_id() != started[1].span_id());
  auto done = json_of(seen->of(event_kind::task_done).at(0));
  CHECK(done.at("outcome").as_string() == "failed");
  CHECK(done.at("metadata").as_object().at("total_attempts").as_int64() == 12);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "the result counts every retry of the task, per agent",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1), exits(1), exits(127, {"not found"})});
  runtime->script("b", {exits(1), exits(0)});
  start(task_with("t1", {"a", "b"}));
  drain();
  auto& r = result();
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.metadata.agent_id == "b");
  CHECK(r.metadata.retry_count == 1); // of the last agent
  CHECK(r.metadata.total_retries == 3);
  CHECK(r.metadata.retries_by_agent ==
        std::map<std::string, int>{{"a", 2}, {"b", 1}});
  auto done = json_of(seen->of(event_kind::task_done).at(0));
  CHECK(done.at("metadata").at("total_retries").as_int64() == 3);
  // Every retry says where its delay came from.
  for (auto& ev : seen->of(event_kind::retry_scheduled)) {
    auto o = json_of(ev);
    CHECK(o.at("delay_source").as_string() == "schedule");
    CHECK(o.at("capped").as_bool() == false);
    CHECK(std::string{o.at("reason").as_string().c_str()}.find("retrying (") !=
          std::string::npos);
  }
}

TEST_CASE_METHOD(supervisor_fixture,
                 "an attempt that never started fails its agent at once when "
                 "starting again cannot help",
                 "[task_supervisor]") {
  runtime::scripted_step missing;
  missing.exit_code = 0;
  missing.infrastructure_error = "image x not found locally";
  missing.started = false;
  missing.retry_futile = true;
  runtime->script("a", {missing});
  runtime->script("b", {exits(0)});
  start(task_with("t1", {"a", "b"}));
  auto& r = result();
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.metadata.agent_id == "b");
  CHECK(runtime->started() == 2);
  CHECK(seen->of(event_kind::retry_scheduled).empty());
  auto exited = json_of(seen->of(event_kind::attempt_exited).at(0));
  CHECK(exited.at("started").as_bool() == false);
  auto cls = json_of(seen->of(event_kind::classified).at(0));
  CHECK(cls.at("class").as_string() == "agent_failure");
  CHECK(cls.at("rule").as_string() == "retry_futile");
  SECTION("with no agent left the task fails with no exit code") {
    runtime->script("c", {missing});
    start(task_with("t2", {"c"}));
    REQUIRE(seen->results.size() == 2);
    auto& r2 = seen->results.back();
    CHECK(r2.outcome == task_outcome::failed);
    CHECK(r2.exit_code == -1);
  }
}

TEST_CASE_METHOD(supervisor_fixture, "max_total_attempts stops the task",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1)});
  runtime->script("b", {exits(1)});
  auto t = task_with("t1", {"a", "b"});
  t.supervisor.max_total_attempts = 5;
  start(t);
  drain();
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.metadata.total_attempts == 5);
  CHECK(runtime->started() == 5);
  REQUIRE(r.error);
  CHECK(r.error->find("max_total_attempts") != std::string::npos);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a crash is restarted once, then the task falls back",
                 "[task_supervisor]") {
  runtime->script("a", {exits(137)});
  runtime->script("b", {exits(0)});
  start(task_with("t1", {"a", "b"}));
  drain();
  auto& r = result();
  CHECK(r.outcome == task_outcome::succeeded);
  CHECK(r.metadata.agent_id == "b");
  CHECK(r.metadata.total_attempts == 3);
  CHECK(seen->of(event_kind::retry_scheduled).size() == 1);
  CHECK(seen->of(event_kind::agent_switched).size() == 1);
  auto cls = json_of(seen->of(event_kind::classified).at(0));
  CHECK(cls.at("class").as_string() == "container_crash");
}

TEST_CASE_METHOD(supervisor_fixture,
                 "cancel and kill during an attempt stop it with no retry",
                 "[task_supervisor]") {
  runtime->script("a", {hangs()});
  start(task_with("t1", {"a", "b"}));
  REQUIRE(runtime->running() == 1);
  auto mode = GENERATE(stop_mode::cancel, stop_mode::kill);
  caf::anon_send(sup, stop_atom::value, mode);
  run();
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == (mode == stop_mode::kill
                            ? runtime::scripted_call::kind::kill
                            : runtime::scripted_call::kind::stop));
  if (mode == stop_mode::cancel)
    CHECK(calls[1].grace == std::chrono::milliseconds{10000});
  auto& r = result();
  CHECK(r.outcome == task_outcome::stopped);
  CHECK(r.exit_code == (mode == stop_mode::kill ? 137 : 143));
  drain();
  CHECK(runtime->started() == 1);
  auto stops = seen->of(event_kind::user_stop);
  REQUIRE(stops.size() == 1);
  CHECK(json_of(stops[0]).at("mode").as_string() == to_string(mode));
  CHECK(json_of(stops[0]).at("message").as_string() ==
        (mode == stop_mode::kill ? "user_kill requested"
                                 : "user_cancel requested"));
  CHECK(seen->of(event_kind::classified).empty());
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a stop during the backoff ends the task at once",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1)});
  start(task_with("t1", {"a"}));
  advance(2);
  REQUIRE(seen->results.empty());
  caf::anon_send(sup, stop_atom::value, stop_mode::cancel);
  run();
  auto& r = result();
  CHECK(r.outcome == task_outcome::stopped);
  auto stops = seen->of(event_kind::user_stop);
  REQUIRE(stops.size() == 1);
  CHECK(json_of(stops[0]).at("message").as_string() ==
        "retry skipped due to user stop");
  drain();
  CHECK(runtime->started() == 1);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "retry_now skips the backoff, force_fallback moves on",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1), exits(0)});
  runtime->script("b", {exits(0)});
  start(task_with("t1", {"a", "b"}));
  REQUIRE(runtime->started() == 1);
  SECTION("retry_now") {
    auto ok = ask<bool>(sup, retry_now_atom::value);
    REQUIRE(ok);
    CHECK(**ok);
    CHECK(runtime->started() == 2); // no simulated time passed
    CHECK(result().metadata.agent_id == "a");
    CHECK(result().outcome == task_outcome::succeeded);
  }
  SECTION("force_fallback") {
    auto ok = ask<bool>(sup, force_fallback_atom::value);
    REQUIRE(ok);
    CHECK(**ok);
    CHECK(runtime->started() == 2);
    CHECK(result().metadata.agent_id == "b");
    CHECK(result().metadata.fallback_count == 1);
  }
  // The stale backoff timer fires into nothing.
  drain();
  CHECK(runtime->started() == 2);
  CHECK(seen->results.size() == 1);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "force_fallback during an attempt stops it and moves on",
                 "[task_supervisor]") {
  runtime->script("a", {hangs()});
  runtime->script("b", {exits(0)});
  start(task_with("t1", {"a", "b"}));
  auto ok = ask<bool>(sup, force_fallback_atom::value);
  REQUIRE(ok);
  CHECK(**ok);
  CHECK(result().outcome == task_outcome::succeeded);
  CHECK(result().metadata.agent_id == "b");
  CHECK(runtime->calls().at(1).what == runtime::scripted_call::kind::stop);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a worker that dies without reporting is an infrastructure "
                 "failure",
                 "[task_supervisor]") {
  runtime::scripted_step broken;
  broken.throw_on_start = true;
  runtime->script("a", {broken, exits(0)});
  start(task_with("t1", {"a"}));
  auto cls = seen->of(event_kind::classified);
  REQUIRE(cls.size() == 1);
  CHECK(json_of(cls[0]).at("class").as_string() == "infrastructure");
  auto exited = json_of(seen->of(event_kind::attempt_exited).at(0));
  CHECK(exited.contains("infrastructure_error"));
  advance(5);
  CHECK(result().outcome == task_outcome::succeeded);
  CHECK(result().metadata.total_attempts == 2);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "scripted durations pass on the simulated clock",
                 "[task_supervisor]") {
  runtime->script("a", {exits(0, {}, 30)});
  start(task_with("t1", {"a"}));
  CHECK(runtime->running() == 1);
  advance(29);
  CHECK(seen->results.empty());
  advance(1);
  CHECK(result().outcome == task_outcome::succeeded);
  auto status = seen->of(event_kind::attempt_exited);
  CHECK(json_of(status.at(0)).at("duration_s").to_number<double>() == 30);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a deadline cancels the running attempt and fails the task",
                 "[task_supervisor]") {
  runtime->script("a", {hangs()});
  auto t = task_with("t1", {"a", "b"});
  t.supervisor.deadline_s = 30;
  t.supervisor.stop_grace_s = 5;
  start(std::move(t));
  advance(29.9);
  REQUIRE(runtime->calls().size() == 1); // only the start
  CHECK(seen->results.empty());
  advance(0.2);
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == runtime::scripted_call::kind::stop);
  CHECK(calls[1].grace == std::chrono::milliseconds{5000});
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  REQUIRE(r.error);
  CHECK(*r.error == "deadline exceeded (30 s)");
  drain();
  // Neither a retry of a nor a fallback to b followed.
  CHECK(runtime->started() == 1);
  CHECK(seen->of(event_kind::classified).empty());
  CHECK(seen->of(event_kind::agent_switched).empty());
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a deadline during the backoff ends the task at once",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1), exits(0)});
  auto t = task_with("t1", {"a"});
  t.supervisor.deadline_s = 3; // the first backoff is 5 s
  start(std::move(t));
  REQUIRE(seen->of(event_kind::retry_scheduled).size() == 1);
  advance(3);
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  REQUIRE(r.error);
  CHECK(*r.error == "deadline exceeded (3 s)");
  drain();
  CHECK(runtime->started() == 1); // the stale backoff timer started nothing
}

TEST_CASE_METHOD(supervisor_fixture,
                 "without a deadline a long attempt is never stopped",
                 "[task_supervisor]") {
  runtime->script("a", {hangs()});
  start(task_with("t1", {"a"}));
  advance(7 * 24 * 3600.0);
  CHECK(runtime->calls().size() == 1);
  CHECK(seen->results.empty());
  caf::anon_send(sup, stop_atom::value, stop_mode::kill);
  run();
  CHECK(result().outcome == task_outcome::stopped);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "every event of an attempt carries that attempt's span, "
                 "task events carry the task's span",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1, {"glitch"}), exits(0)});
  start(task_with("t1", {"a"}));
  drain();
  REQUIRE(result().outcome == task_outcome::succeeded);
  auto submitted = seen->of(event_kind::task_submitted).at(0);
  CHECK(submitted.attempt == 0);
  std::set<std::string> spans;
  for (auto& ev : seen->events) {
    CHECK(ev.trace_id() == submitted.trace_id());
    CHECK(ev.span_id().size() == 16);
    CHECK(ev.span_id().find_first_not_of("0123456789abcdef") ==
          std::string::npos);
    auto attempt_event = ev.kind != event_kind::task_submitted &&
                         ev.kind != event_kind::task_done &&
                         ev.kind != event_kind::escalated;
    if (!attempt_event) {
      CHECK(ev.span_id() == submitted.span_id());
      continue;
    }
    auto started = seen->of(event_kind::attempt_started)
                     .at(static_cast<std::size_t>(ev.attempt - 1));
    CHECK(ev.span_id() == started.span_id());
    spans.insert(std::string{ev.span_id()});
    // The JSON line says the same as the fields.
    auto o = json_of(ev);
    CHECK(o.at("span_id").as_string() == ev.span_id());
    CHECK(o.at("trace_id").as_string() == ev.trace_id());
    CHECK(o.at("attempt").as_int64() == ev.attempt);
  }
  CHECK(spans.size() == 2);
  CHECK(spans.count(std::string{submitted.span_id()}) == 0);
}

TEST_CASE_METHOD(supervisor_fixture, "a fallback cycle becomes a warning event",
                 "[task_supervisor]") {
  auto t = task_with("t1", {"a", "b"});
  t.selection->agent_fallbacks["b"] = "a"; // a -> b -> a: a cycle
  runtime->script("a", {exits(127)});
  runtime->script("b", {exits(127)});
  start(t);
  auto warnings = seen->of(event_kind::warning);
  REQUIRE(warnings.size() == 1);
  CHECK(json_of(warnings[0]).at("message").as_string().size() > 0);
  CHECK(seen->kinds().at(1) == event_kind::warning);
  // The chain is [a, b]: b's fallback to a is cut.
  CHECK(result().outcome == task_outcome::failed);
  CHECK(runtime->started() == 2);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "a task waiting out a long backoff holds no worker, the next "
                 "attempt gets one",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1, {"transient glitch"}), hangs()});
  start(task_with("t1", {"a"}));
  REQUIRE(delays() == std::vector<double>{5});
  // The worker of attempt 1 was kept for the next attempt until the 5 s
  // backoff was set: then it was let go (~3 KB per waiting task).
  auto waiting = sys().registry().running();
  advance(5);
  CHECK(runtime->started() == 2);
  CHECK(sys().registry().running() == waiting + 1);
  caf::anon_send(sup, stop_atom::value, stop_mode::kill);
  run();
  CHECK(result().outcome == task_outcome::stopped);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "tasks with their own settings keep them while tasks with "
                 "the default settings share theirs",
                 "[task_supervisor]") {
  runtime->script("a", {exits(1, {"transient glitch"})});
  auto custom = task_with("custom", {"a"});
  custom.supervisor.max_retries_per_agent = 2;
  custom.supervisor.backoff_base_seconds = 1;
  std::vector<task_supervisor_actor> sups;
  for (auto t :
       {task_with("default-1", {"a"}), custom, task_with("default-2", {"a"})})
    sups.push_back(spawn(std::move(t)));
  run();
  drain();
  REQUIRE(seen->results.size() == 3);
  for (auto& r : seen->results) {
    CAPTURE(r.task_id);
    CHECK(r.outcome == task_outcome::failed);
    if (r.task_id == "custom") {
      CHECK(r.metadata.total_attempts == 3);
      CHECK(delays(r.task_id) == std::vector<double>{1, 3});
      auto last = seen->of(event_kind::retry_scheduled, r.task_id).back();
      CHECK(json_of(last).at("max_retries").as_int64() == 2);
    } else {
      CHECK(r.metadata.total_attempts == 4);
      CHECK(delays(r.task_id) == std::vector<double>{5, 15, 45});
      auto last = seen->of(event_kind::retry_scheduled, r.task_id).back();
      CHECK(json_of(last).at("max_retries").as_int64() == 3);
    }
  }
}

TEST_CASE_METHOD(supervisor_fixture,
                 "the result carries the last attempt's exit code and "
                 "artifacts",
                 "[task_supervisor]") {
  auto first = exits(1, {"transient glitch"});
  first.artifacts = {"/art/1/partial.txt"};
  auto second = exits(7, {"authentication failed"});
  second.artifacts = {"/art/2/a.txt", "/art/2/b.txt"};
  runtime->script("a", {first, second});
  start(task_with("t1", {"a"}));
  CHECK(seen->results.empty()); // waiting out the first backoff
  drain();
  auto& r = result();
  CHECK(r.outcome == task_outcome::failed);
  CHECK(r.metadata.total_attempts == 2);
  CHECK(r.exit_code == 7);
  CHECK(r.artifacts ==
        std::vector<std::string>{"/art/2/a.txt", "/art/2/b.txt"});
  auto done = json_of(seen->of(event_kind::task_done).at(0));
  CHECK(done.at("exit_code").as_int64() == 7);
  CHECK(done.at("artifacts").as_array().size() == 2);
}

TEST_CASE_METHOD(supervisor_fixture,
                 "tasks running at once each keep their own runtime, attempt "
                 "root and agents",
                 "[task_supervisor]") {
  auto other =
    std::make_shared<runtime::scripted_runtime>(make_actor_timer(sys()));
  // One classifier and one backoff actor for all, as a node has: only the
  // runtime, the attempt root or the agents tell the tasks apart.
  auto shared_classifier = keep(
    spawn_classifier(sys(), *classifier::make(default_classifier_rules())));
  auto shared_backoff = keep(spawn_backoff(sys(), 1));
  auto start_one = [&](const std::string& id, const std::string& agent_id,
                       std::shared_ptr<runtime::container_runtime> rt,
                       std::string root) {
    supervisor_options opts;
    opts.task = task_with(id, {agent_id});
    opts.runtime = std::move(rt);
    opts.classifier = shared_classifier;
    opts.backoff = shared_backoff;
    opts.attempt_root = std::move(root);
    return spawn_task_supervisor(
      sys(), caf::actor_cast<task_parent_actor>(parent), std::move(opts));
  };
  const std::string root = "/tmp/tasksup-actor-tests";
  std::vector<task_supervisor_actor> sups;
  sups.push_back(start_one("t1", "a", runtime, root));
  sups.push_back(start_one("t2", "a", other, "/tmp/tasksup-other"));
  sups.push_back(start_one("t3", "a", runtime, root));
  sups.push_back(start_one("t4", "c", other, "/tmp/tasksup-other"));
  sups.push_back(start_one("t5", "a", runtime, "/tmp/tasksup-third"));
  run();
  REQUIRE(seen->results.size() == 5);
  auto dirs_and_agents = [](const runtime::scripted_runtime& rt) {
    std::vector<std::string> out;
    for (auto& c : rt.calls())
      out.push_back(c.spec.attempt_dir + " " + c.spec.agent_id);
    std::sort(out.begin(), out.end());
    return out;
  };
  CHECK(dirs_and_agents(*runtime) ==
        std::vector<std::string>{"/tmp/tasksup-actor-tests/t1/attempt-1 a",
                                 "/tmp/tasksup-actor-tests/t3/attempt-1 a",
                                 "/tmp/tasksup-third/t5/attempt-1 a"});
  CHECK(dirs_and_agents(*other) ==
        std::vector<std::string>{"/tmp/tasksup-other/t2/attempt-1 a",
                                 "/tmp/tasksup-other/t4/attempt-1 c"});
}

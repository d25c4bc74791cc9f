// The task supervisor's timers for issue 13 on simulated time: the attempt
// timeout, and the restart backoff of a permanent task.

#include "tasksup/actors/task_supervisor_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct steps_fixture : fixture {
  std::shared_ptr<collected> seen = std::make_shared<collected>();
  caf::actor parent = collector(seen);

  void start(task_spec t) {
    supervisor_options opts;
    opts.task = std::move(t);
    opts.default_agent = agent("default");
    opts.runtime = runtime;
    opts.seed = 7;
    opts.attempt_root = "/tmp/tasksup-actor-tests";
    spawn_task_supervisor(sys(), caf::actor_cast<task_parent_actor>(parent),
                          std::move(opts));
    run();
  }

  std::vector<std::string> field(event_kind kind, const char* key) {
    std::vector<std::string> out;
    for (auto& ev : seen->of(kind)) {
      auto obj = boost::json::parse(ev.json()).as_object();
      out.emplace_back(obj.at(key).as_string());
    }
    return out;
  }
};

} // namespace

TEST_CASE_METHOD(steps_fixture,
                 "an attempt that outlives attempt_timeout_s is stopped on "
                 "time and retried as `timeout`",
                 "[task_supervisor][steps]") {
  runtime->script("a", {hangs(), exits(0)});
  auto t = task_with("to", {"a"});
  t.supervisor.attempt_timeout_s = 30;
  t.supervisor.stop_grace_s = 2;
  start(std::move(t));
  REQUIRE(runtime->started() == 1);
  advance(29.999);
  CHECK(runtime->calls().size() == 1); // not stopped early
  advance(0.001);
  // Stopped with the grace, then classified timeout and retried after the
  // standard 5 s.
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == runtime::scripted_call::kind::stop);
  CHECK(field(event_kind::classified, "class") ==
        std::vector<std::string>{"timeout"});
  advance(4.999);
  CHECK(runtime->started() == 1);
  advance(0.001);
  CHECK(runtime->started() == 2);
  REQUIRE(seen->results.size() == 1);
  CHECK(seen->results[0].outcome == task_outcome::succeeded);
  // The second attempt's timer (set when it started) finds nothing to stop.
  advance(60);
  CHECK(runtime->calls().size() == 3);
}

TEST_CASE_METHOD(steps_fixture,
                 "a permanent task waits its restart backoff after each clean "
                 "exit and says so",
                 "[task_supervisor][steps]") {
  runtime->script("a",
                  {exits(0), exits(0), exits(0), exits(0, {}, 400), exits(0)});
  auto t = task_with("pm", {"a"});
  t.supervisor.restart = restart_type::permanent;
  t.supervisor.intensity.max_restarts = 4;
  start(std::move(t));
  // 1 s, then 2 s, then 4 s: never at once.
  std::size_t n = 1;
  for (double delay : {1.0, 2.0, 4.0}) {
    REQUIRE(runtime->started() == n);
    advance(delay - 0.001);
    CHECK(runtime->started() == n);
    advance(0.001);
    CHECK(runtime->started() == ++n);
  }
  CHECK(seen->of(event_kind::retry_scheduled).size() == 3);
  // Attempt 4 runs 400 s (longer than reset_after_s = 300): the schedule
  // starts over at 1 s.
  advance(400);
  CHECK(runtime->started() == 4);
  advance(0.999);
  CHECK(runtime->started() == 4);
  advance(0.001);
  CHECK(runtime->started() == 5);
  // The fifth restart exceeds the intensity (4): the task fails.
  REQUIRE(seen->results.size() == 1);
  CHECK(seen->results[0].outcome == task_outcome::failed);
}

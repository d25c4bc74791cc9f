// The task machine when a task's preflight (or a rule) says "not now":
// the task parks on the `not_now` schedule and spends no retry, no restart
// and no attempt. (state, input) -> (state, effects), no actor system.

#include "task_machine_support.hpp"

#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// A task whose attempts go through a preflight.
struct task : machine_task {
  explicit task(supervisor_config cfg = with_preflight(), std::size_t chain = 1)
    : machine_task(std::move(cfg), chain) {}

  static supervisor_config with_preflight() {
    supervisor_config cfg;
    cfg.steps.preflight = true;
    return cfg;
  }

  /// The pending permission is granted: the preflight runs.
  void to_preflight() {
    grant();
    REQUIRE(st.phase == task_phase::preflight);
  }

  /// The preflight answers with `code` ("not now" for 75).
  void preflight(int code, bool timed_out = false) {
    auto run = only<effect::run_preflight>(fx);
    REQUIRE(feed(input::preflight_done{run.attempt, code == 0, code, timed_out,
                                       "gpu busy"}));
  }

  /// The not-now timer fires.
  void wake() {
    auto timer = only<effect::set_timer>(fx);
    REQUIRE(timer.kind == timer_kind::quota);
    now += timer.delay_s;
    REQUIRE(feed(input::timer{timer_kind::quota, timer.generation}));
  }
};

} // namespace

TEST_CASE("not now: a preflight's exit 75 parks the task without counting "
          "an attempt or spending a retry",
          "[task_machine][not_now]") {
  task t;
  t.now = 100;
  REQUIRE(t.feed(input::start{}));
  t.to_preflight();
  t.preflight(not_now_exit_code);
  // The slot goes back; the skip is classified, its agent not blamed.
  CHECK(has<effect::release_slot>(t.fx));
  CHECK_FALSE(has<effect::report_agent>(t.fx));
  auto c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::not_now);
  CHECK(c.rule == "preflight_not_now");
  CHECK(c.line == "gpu busy");
  auto wait = only<effect::not_now_wait>(t.fx);
  CHECK(wait.why.rule == decision_rule::not_now);
  CHECK(wait.why.count == 1);
  CHECK(wait.why.resume_at_s == 130);
  CHECK(describe(wait.why, t.machine.config()) ==
        "not_now failure (rule \"preflight_not_now\", line \"gpu busy\"): not "
        "now, trying again in 30s (1 in a row; no retry spent)");
  auto timer = only<effect::set_timer>(t.fx);
  CHECK(timer.kind == timer_kind::quota);
  CHECK(timer.delay_s == 30);
  CHECK(t.st.phase == task_phase::parked);
  CHECK(t.st.not_now);
  CHECK(t.st.resume_at_s == 130);
  CHECK(t.st.counters.total_attempts == 0);
  CHECK(t.st.counters.retry_count == 0);
  CHECK_FALSE(has<effect::retry_scheduled>(t.fx));
  // Woken, it asks again, with no retry token to spend; this time the
  // preflight passes and the agent's attempt is the task's first.
  t.wake();
  CHECK_FALSE(t.st.not_now);
  CHECK_FALSE(only<effect::ask_permission>(t.fx).need_token);
  t.to_preflight();
  t.preflight(0);
  CHECK(only<effect::start_attempt>(t.fx).attempt == 2);
  CHECK(t.st.counters.total_attempts == 1);
  CHECK(t.st.counters.total_retries == 0);
}

TEST_CASE("not now: the waits follow the not_now schedule up to its cap, and "
          "start over once a preflight passes",
          "[task_machine][not_now]") {
  struct row {
    std::vector<int> preflights;
    std::vector<double> waits;
  };
  auto rows = std::vector<row>{
    {{75, 75, 75, 75, 75, 75, 75, 0}, {30, 60, 120, 240, 480, 600, 600}},
    {{75, 75, 0}, {30, 60}},
  };
  for (auto& r : rows) {
    task t;
    REQUIRE(t.feed(input::start{}));
    std::vector<double> waits;
    for (auto code : r.preflights) {
      t.to_preflight();
      t.preflight(code);
      if (code == 0)
        break;
      waits.push_back(only<effect::set_timer>(t.fx).delay_s);
      t.wake();
    }
    CHECK(waits == r.waits);
    CHECK(t.st.counters.total_attempts == 1);
    CHECK(t.st.not_now_streak == 0);
  }
  SECTION("a failure after a pass starts the schedule over") {
    task t;
    REQUIRE(t.feed(input::start{}));
    t.to_preflight();
    t.preflight(75);
    t.wake();
    t.to_preflight();
    t.preflight(0);
    REQUIRE(t.feed(input::attempt_ended{t.st.attempt, exited(1)}));
    auto ask = only<effect::classify>(t.fx);
    REQUIRE(
      t.feed(input::classified{ask.generation, as(error_class::retryable)}));
    t.delay(1);
    auto backoff = only<effect::set_timer>(t.fx);
    REQUIRE(t.feed(input::timer{timer_kind::backoff, backoff.generation}));
    t.to_preflight();
    t.preflight(75);
    CHECK(only<effect::set_timer>(t.fx).delay_s == 30);
  }
  SECTION("supervisor.backoff.not_now sets the schedule") {
    auto cfg = task::with_preflight();
    backoff_spec spec;
    spec.table_s = {2, 7};
    spec.max_s = 5;
    cfg.backoff[error_class::not_now] = spec;
    task t{cfg};
    REQUIRE(t.feed(input::start{}));
    std::vector<double> waits;
    for (int i = 0; i < 3; ++i) {
      t.to_preflight();
      t.preflight(75);
      waits.push_back(only<effect::set_timer>(t.fx).delay_s);
      t.wake();
    }
    CHECK(waits == std::vector<double>{2, 5, 5});
  }
}

TEST_CASE("not now: a planned retry waits unspent through not-nows, and a "
          "permanent task's intensity does not count them",
          "[task_machine][not_now]") {
  auto cfg = task::with_preflight();
  cfg.restart = restart_type::permanent;
  cfg.intensity.max_restarts = 1;
  cfg.intensity.period_s = 1000;
  task t{cfg};
  REQUIRE(t.feed(input::start{}));
  t.to_preflight();
  t.preflight(0);
  REQUIRE(t.feed(input::attempt_ended{t.st.attempt, exited(1)}));
  auto ask = only<effect::classify>(t.fx);
  REQUIRE(
    t.feed(input::classified{ask.generation, as(error_class::retryable)}));
  t.delay(1);
  auto backoff = only<effect::set_timer>(t.fx);
  REQUIRE(t.feed(input::timer{timer_kind::backoff, backoff.generation}));
  // The retry's permission comes with a token; its preflight says not now,
  // five times over: nothing is spent.
  CHECK(only<effect::ask_permission>(t.fx).need_token);
  for (int i = 0; i < 5; ++i) {
    t.to_preflight();
    t.preflight(75);
    CHECK(t.st.counters.retry_count == 0);
    CHECK(t.st.counters.restarts.count(t.now) == 0);
    CHECK(t.st.counters.total_attempts == 1);
    CHECK(task_machine::shown_retry_count(t.st) == 1);
    t.wake();
  }
  t.to_preflight();
  t.preflight(0);
  CHECK(has<effect::start_attempt>(t.fx));
  CHECK(t.st.counters.retry_count == 1);
  CHECK(t.st.counters.total_retries == 1);
  CHECK(t.st.counters.total_attempts == 2);
}

TEST_CASE("not now: other preflight refusals still spend a retry",
          "[task_machine][not_now]") {
  for (auto timed_out : {false, true}) {
    task t;
    REQUIRE(t.feed(input::start{}));
    t.to_preflight();
    // A timed-out preflight is no answer, whatever its code.
    t.preflight(timed_out ? 75 : 1, timed_out);
    auto c = only<effect::classified>(t.fx).result;
    CHECK(c.cls == error_class::preflight_failed);
    CHECK(t.st.counters.total_attempts == 1);
    CHECK(t.st.phase == task_phase::delaying);
    CHECK(task_machine::shown_retry_count(t.st) == 1);
  }
}

TEST_CASE("not now: an agent's own not_now (a rule) parks the task too, its "
          "attempt ran and counts",
          "[task_machine][not_now]") {
  task t{supervisor_config{}};
  t.start_running();
  REQUIRE(t.feed(input::attempt_ended{t.st.attempt, exited(75)}));
  auto ask = only<effect::classify>(t.fx);
  REQUIRE(t.feed(
    input::classified{ask.generation, as(error_class::not_now, "gpu_busy")}));
  CHECK(has<effect::not_now_wait>(t.fx));
  CHECK(t.st.phase == task_phase::parked);
  CHECK(t.st.counters.total_attempts == 1);
  CHECK(t.st.counters.retry_count == 0);
  SECTION("even for a temporary task") {
    supervisor_config cfg;
    cfg.restart = restart_type::temporary;
    task tt{cfg};
    tt.start_running();
    REQUIRE(tt.feed(input::attempt_ended{tt.st.attempt, exited(75)}));
    auto a = only<effect::classify>(tt.fx);
    REQUIRE(tt.feed(input::classified{a.generation, as(error_class::not_now)}));
    CHECK(tt.st.phase == task_phase::parked);
  }
  SECTION("unless its action says otherwise") {
    supervisor_config cfg;
    cfg.actions[error_class::not_now] = action::fail;
    task tf{cfg};
    tf.start_running();
    REQUIRE(tf.feed(input::attempt_ended{tf.st.attempt, exited(75)}));
    auto a = only<effect::classify>(tf.fx);
    REQUIRE(tf.feed(input::classified{a.generation, as(error_class::not_now)}));
    CHECK(only<effect::finish>(tf.fx).outcome == end_kind::failed);
  }
}

TEST_CASE("not now: the user's controls and a node restart during the wait",
          "[task_machine][not_now]") {
  task t;
  t.now = 100;
  REQUIRE(t.feed(input::start{}));
  t.to_preflight();
  t.preflight(75);
  auto timer = only<effect::set_timer>(t.fx);
  SECTION("retry-now cuts the wait short") {
    t.now = 110;
    REQUIRE(t.feed(input::retry_now{}));
    CHECK(only<effect::retry_requested>(t.fx).skipped_s == 20);
    CHECK(has<effect::ask_permission>(t.fx));
    CHECK_FALSE(t.st.not_now);
    // The old timer is stale.
    CHECK_FALSE(t.feed(input::timer{timer_kind::quota, timer.generation}));
  }
  SECTION("stop ends the task") {
    REQUIRE(t.feed(input::stop{}));
    CHECK(only<effect::finish>(t.fx).outcome == end_kind::stopped);
    CHECK_FALSE(t.st.not_now);
  }
  SECTION("pause holds the task past the wait; resume goes on") {
    REQUIRE(t.feed(input::pause{}));
    CHECK(only<effect::task_paused>(t.fx).parked);
    t.now = 130;
    REQUIRE(t.feed(input::timer{timer_kind::quota, timer.generation}));
    CHECK_FALSE(has<effect::ask_permission>(t.fx));
    REQUIRE(t.feed(input::resume{}));
    CHECK(has<effect::ask_permission>(t.fx));
  }
  SECTION("a restarted node waits only what is left") {
    t.now = 120;
    REQUIRE(t.feed(input::resumed{}));
    auto again = only<effect::set_timer>(t.fx);
    CHECK(again.kind == timer_kind::quota);
    CHECK(again.delay_s == 10);
    t.now = 130;
    REQUIRE(t.feed(input::timer{timer_kind::quota, again.generation}));
    CHECK(has<effect::ask_permission>(t.fx));
  }
  SECTION("a forced fallback leaves the wait for the next agent") {
    task two{task::with_preflight(), 2};
    REQUIRE(two.feed(input::start{}));
    two.to_preflight();
    two.preflight(75);
    REQUIRE(two.feed(input::force_fallback{}));
    CHECK(only<effect::agent_switched>(two.fx).switched.agent_index == 1);
    CHECK_FALSE(two.st.not_now);
    CHECK_FALSE(only<effect::ask_permission>(two.fx).need_token);
  }
}

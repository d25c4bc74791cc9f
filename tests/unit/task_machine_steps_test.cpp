// The task machine's steps around an attempt (issue 13): preflight, gates,
// delivery, attempt timeout, voluntary end and the restart backoff of
// permanent tasks, fed by hand.

#include "task_machine_support.hpp"

#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct task : machine_task {
  explicit task(supervisor_config cfg = {}, std::size_t chain = 1)
    : machine_task(std::move(cfg), chain) {}

  void start() {
    REQUIRE(feed(input::start{}));
    grant();
  }

  void end(attempt_outcome o, bool done_file = false) {
    input::attempt_ended in;
    in.attempt = st.attempt;
    in.outcome = std::move(o);
    in.done_file = done_file;
    REQUIRE(feed(std::move(in)));
  }

  const effect::finish& finished() { return only<effect::finish>(fx); }
};

supervisor_config repo_task() {
  supervisor_config cfg;
  cfg.steps.gates = true;
  cfg.steps.deliver = true;
  return cfg;
}

} // namespace

TEST_CASE("steps: an attempt that exits 0 succeeds only after its gates "
          "pass and its change is delivered",
          "[task_machine][steps]") {
  task t{repo_task()};
  t.start();
  t.end(exited(0));
  CHECK(t.st.phase == task_phase::gating);
  CHECK(only<effect::run_gates>(t.fx).attempt == 1);
  CHECK_FALSE(has<effect::finish>(t.fx));
  // A stale verdict (another attempt) changes nothing.
  CHECK_FALSE(t.feed(input::gates_done{2, true, "", 0, false, ""}));
  REQUIRE(t.feed(input::gates_done{1, true, "", 0, false, ""}));
  CHECK(t.st.phase == task_phase::delivering);
  CHECK(only<effect::deliver>(t.fx).attempt == 1);
  REQUIRE(t.feed(input::delivered{1, true, ""}));
  CHECK(t.finished().outcome == end_kind::succeeded);
  CHECK(t.finished().cause == end_cause::decision);
}

TEST_CASE("steps: a failing gate is classified gate_failed and retried with "
          "the standard backoff, then falls back",
          "[task_machine][steps]") {
  auto cfg = repo_task();
  cfg.max_retries_per_agent = 1;
  task t{cfg, 2};
  t.start();
  t.end(exited(0));
  REQUIRE(t.feed(input::gates_done{1, false, "tests", 1, false, "FAIL x"}));
  auto& c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::gate_failed);
  CHECK(c.rule == "gate:tests");
  CHECK(c.line == "FAIL x");
  // Nothing delivered, no breaker report: the agent works, its work failed.
  CHECK_FALSE(has<effect::deliver>(t.fx));
  CHECK_FALSE(has<effect::report_agent>(t.fx));
  auto ask = only<effect::ask_delay>(t.fx);
  CHECK(ask.spec.table_s == standard_backoff(5.0).table_s);
  t.delay(5);
  REQUIRE(t.feed(input::timer{timer_kind::backoff, t.st.generation}));
  t.grant();
  CHECK(t.st.attempt == 2);
  t.end(exited(0));
  REQUIRE(t.feed(input::gates_done{2, false, "lint", 2, false, "E1"}));
  // Retries exhausted: the next agent.
  CHECK(has<effect::agent_switched>(t.fx));
}

TEST_CASE("steps: gate_failed takes its configured action",
          "[task_machine][steps]") {
  auto cfg = repo_task();
  cfg.actions[error_class::gate_failed] = action::fail;
  task t{cfg};
  t.start();
  t.end(exited(0));
  REQUIRE(t.feed(input::gates_done{1, false, "tests", 1, true, ""}));
  CHECK(only<effect::classified>(t.fx).result.line == "gate tests timed out");
  CHECK(t.finished().outcome == end_kind::failed);
}

TEST_CASE("steps: a delivery that fails fails the task with its reason",
          "[task_machine][steps]") {
  task t{repo_task()};
  t.start();
  t.end(exited(0));
  REQUIRE(t.feed(input::gates_done{1, true, "", 0, false, ""}));
  REQUIRE(t.feed(input::delivered{1, false, "patch does not apply"}));
  CHECK(t.finished().outcome == end_kind::failed);
  CHECK(t.finished().cause == end_cause::delivery_failed);
  CHECK(describe(t.finished(), t.machine.config()) ==
        "delivery failed: patch does not apply");
}

TEST_CASE("steps: a stop while gates run ends the task stopped",
          "[task_machine][steps]") {
  task t{repo_task()};
  t.start();
  t.end(exited(0));
  REQUIRE(t.feed(input::stop{stop_request::cancel}));
  CHECK(t.finished().outcome == end_kind::stopped);
  CHECK_FALSE(t.feed(input::gates_done{1, true, "", 0, false, ""}));
  // A forced fallback cannot interrupt gates either.
  task u{repo_task(), 2};
  u.start();
  u.end(exited(0));
  CHECK_FALSE(u.feed(input::force_fallback{}));
}

TEST_CASE("steps: a failed preflight skips the attempt with its own class",
          "[task_machine][steps]") {
  supervisor_config cfg;
  cfg.steps.preflight = true;
  task t{cfg};
  t.start();
  CHECK(t.st.phase == task_phase::preflight);
  CHECK(only<effect::run_preflight>(t.fx).attempt == 1);
  CHECK_FALSE(has<effect::start_attempt>(t.fx));
  REQUIRE(t.feed(input::preflight_done{1, false, 3, false, "quota low"}));
  auto& c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::preflight_failed);
  CHECK(c.rule == "preflight");
  CHECK(c.line == "quota low");
  CHECK(has<effect::release_slot>(t.fx));
  CHECK_FALSE(has<effect::report_agent>(t.fx));
  t.delay(1);
  REQUIRE(t.feed(input::timer{timer_kind::backoff, t.st.generation}));
  t.grant();
  REQUIRE(t.feed(input::preflight_done{2, true, 0, false, ""}));
  CHECK(only<effect::start_attempt>(t.fx).attempt == 2);
  CHECK(t.st.counters.total_attempts == 2);
}

TEST_CASE("steps: an attempt that outlives attempt_timeout_s is stopped and "
          "classified timeout",
          "[task_machine][steps]") {
  supervisor_config cfg;
  cfg.attempt_timeout_s = 30;
  cfg.stop_grace_s = 2;
  task t{cfg};
  t.start();
  auto timer = only<effect::set_timer>(t.fx);
  CHECK(timer.kind == timer_kind::attempt);
  CHECK(timer.delay_s == 30);
  CHECK(timer.generation == 1);
  REQUIRE(t.feed(input::timer{timer_kind::attempt, 1}));
  auto stop = only<effect::stop_attempt>(t.fx);
  CHECK(stop.mode == stop_request::cancel);
  CHECK(stop.grace_s == 2);
  CHECK(only<effect::attempt_timed_out>(t.fx).timeout_s == 30);
  // Fired twice: nothing more.
  CHECK_FALSE(t.feed(input::timer{timer_kind::attempt, 1}));
  t.end(exited(143));
  auto& c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::timeout);
  CHECK(c.rule == "attempt_timeout");
  CHECK_FALSE(has<effect::classify>(t.fx));
  // Retried: the next attempt gets a timer of its own; the old one is stale.
  t.delay(0);
  t.grant();
  CHECK(only<effect::set_timer>(t.fx).generation == 2);
  CHECK_FALSE(t.feed(input::timer{timer_kind::attempt, 1}));
  t.end(exited(0));
  CHECK(t.finished().outcome == end_kind::succeeded);
}

TEST_CASE("steps: the task deadline and the attempt timeout are separate",
          "[task_machine][steps]") {
  supervisor_config cfg;
  cfg.deadline_s = 100;
  task t{cfg};
  t.start();
  // No attempt timeout unless set.
  for (auto& e : t.fx)
    if (auto* x = std::get_if<effect::set_timer>(&e))
      CHECK(x->kind != timer_kind::attempt);
  CHECK_FALSE(t.feed(input::timer{timer_kind::attempt, 1}));
}

TEST_CASE("steps: a voluntary end stops even a permanent task, as succeeded",
          "[task_machine][steps]") {
  supervisor_config cfg;
  cfg.restart = restart_type::permanent;
  cfg.done_exit_code = 99;
  SECTION("by exit code") {
    task t{cfg};
    t.start();
    t.end(exited(99));
    CHECK(only<effect::voluntary_end>(t.fx).exit_code == 99);
    CHECK(t.finished().outcome == end_kind::succeeded);
    CHECK(t.finished().cause == end_cause::voluntary);
    CHECK_FALSE(has<effect::ask_delay>(t.fx));
  }
  SECTION("by the done file") {
    task t{cfg};
    t.start();
    t.end(exited(0), true);
    CHECK(only<effect::voluntary_end>(t.fx).done_file);
    CHECK(t.finished().outcome == end_kind::succeeded);
  }
  SECTION("the done file after a failure is no voluntary end") {
    task t{cfg};
    t.start();
    t.end(exited(1), true);
    CHECK_FALSE(has<effect::voluntary_end>(t.fx));
    CHECK(has<effect::classify>(t.fx));
  }
  SECTION("a repository task's voluntary end passes its gates first") {
    auto c = cfg;
    c.steps.gates = true;
    c.steps.deliver = true;
    task t{c};
    t.start();
    t.end(exited(99));
    CHECK(only<effect::run_gates>(t.fx).voluntary);
    REQUIRE(t.feed(input::gates_done{1, true, "", 0, false, ""}));
    REQUIRE(t.feed(input::delivered{1, true, ""}));
    CHECK(t.finished().cause == end_cause::voluntary);
  }
}

TEST_CASE("steps: a permanent task's restarts follow restart_backoff and "
          "start over after a stable run",
          "[task_machine][steps]") {
  supervisor_config cfg;
  cfg.restart = restart_type::permanent;
  cfg.intensity.reset_after_s = 60;
  task t{cfg};
  t.start();
  for (int i = 0; i < 3; ++i) {
    t.end(exited(0, 1));
    auto ask = only<effect::ask_delay>(t.fx);
    CHECK(ask.retry_index == i);
    CHECK_FALSE(ask.hint_s);
    t.delay(1 << i);
    // Every restart is announced with its delay.
    CHECK(only<effect::retry_scheduled>(t.fx).plan.rule ==
          decision_rule::restart);
    CHECK(only<effect::set_timer>(t.fx).delay_s == (1 << i));
    REQUIRE(t.feed(input::timer{timer_kind::backoff, t.st.generation}));
    t.grant();
  }
  // A stable run: back to the first step.
  t.end(exited(0, 61));
  CHECK(only<effect::ask_delay>(t.fx).retry_index == 0);
}

// -- property: random inputs with every step ---------------------------------

namespace {

/// The world around a task with preflight, gates, delivery, an attempt
/// timeout and a done exit code: it answers what the machine asks, in a
/// random order, mixed with user controls and stale replies.
struct step_world {
  step_world(std::uint64_t seed, supervisor_config cfg)
    : t(std::move(cfg), 2), rng(seed) {}

  task t;
  std::mt19937_64 rng;
  std::optional<std::uint64_t> permission;
  std::optional<std::uint64_t> classify_gen;
  std::optional<std::uint64_t> delay_gen;
  std::optional<std::uint64_t> backoff_timer;
  std::optional<int> attempt_timer;
  int preflight = 0;
  int gates = 0;
  int deliver = 0;
  int running = 0;
  bool slot = false;
  int finishes = 0;

  std::size_t pick(std::size_t n) { return rng() % n; }

  void feed(machine_input in) {
    auto was_done = t.st.phase == task_phase::done;
    t.fx.clear();
    t.machine.handle(t.st, std::move(in), t.now, t.fx);
    if (was_done)
      REQUIRE(t.fx.empty()); // nothing moves a finished task
    for (auto& e : t.fx) {
      if (auto* x = std::get_if<effect::ask_permission>(&e)) {
        permission = x->generation;
        if (x->need_slot)
          slot = true;
      } else if (std::holds_alternative<effect::release_slot>(e)) {
        slot = false;
        permission.reset();
      } else if (auto* x = std::get_if<effect::run_preflight>(&e)) {
        preflight = x->attempt;
      } else if (auto* x = std::get_if<effect::start_attempt>(&e)) {
        REQUIRE(running == 0);
        running = x->attempt;
      } else if (auto* x = std::get_if<effect::run_gates>(&e)) {
        // Gates only for an attempt that ended.
        REQUIRE(running == 0);
        gates = x->attempt;
      } else if (auto* x = std::get_if<effect::deliver>(&e)) {
        REQUIRE(gates == 0);
        deliver = x->attempt;
      } else if (auto* x = std::get_if<effect::classify>(&e)) {
        classify_gen = x->generation;
      } else if (auto* x = std::get_if<effect::ask_delay>(&e)) {
        delay_gen = x->generation;
      } else if (auto* x = std::get_if<effect::set_timer>(&e)) {
        if (x->kind == timer_kind::backoff)
          backoff_timer = x->generation;
        else if (x->kind == timer_kind::attempt)
          attempt_timer = static_cast<int>(x->generation);
      } else if (std::holds_alternative<effect::finish>(e)) {
        ++finishes;
      }
    }
    REQUIRE(finishes <= 1);
    if (t.st.phase == task_phase::done)
      REQUIRE_FALSE(t.st.holds_slot);
    if (t.st.holds_slot)
      REQUIRE((t.st.phase == task_phase::waiting ||
               t.st.phase == task_phase::running ||
               t.st.phase == task_phase::preflight));
  }

  void step(bool cooperative) {
    t.now += static_cast<double>(pick(50)) / 10.0;
    switch (pick(cooperative ? 9 : 12)) {
      case 0:
        if (permission) {
          auto g = *permission;
          permission.reset();
          feed(input::permission{g, cooperative || pick(6) != 0, true, "x"});
        }
        break;
      case 1:
        if (preflight != 0) {
          auto a = std::exchange(preflight, 0);
          feed(input::preflight_done{a, pick(3) != 0, 1, false, "no"});
        }
        break;
      case 2:
        if (running != 0) {
          auto a = std::exchange(running, 0);
          int codes[] = {0, 1, 99};
          input::attempt_ended in;
          in.attempt = a;
          in.outcome = exited(codes[pick(3)]);
          in.done_file = pick(5) == 0;
          feed(std::move(in));
        }
        break;
      case 3:
        if (gates != 0) {
          auto a = std::exchange(gates, 0);
          feed(input::gates_done{a, pick(2) == 0, "g", 1, false, "x"});
        }
        break;
      case 4:
        if (deliver != 0) {
          auto a = std::exchange(deliver, 0);
          feed(input::delivered{a, pick(4) != 0, "conflict"});
        }
        break;
      case 5:
        if (classify_gen) {
          auto g = *classify_gen;
          classify_gen.reset();
          classification c;
          c.cls = all_error_classes[pick(all_error_classes.size())];
          feed(input::classified{g, c});
        }
        break;
      case 6:
        if (delay_gen) {
          auto g = *delay_gen;
          delay_gen.reset();
          delay_decision d;
          d.delay_s = static_cast<double>(pick(3));
          feed(input::delay_decided{g, d});
        }
        break;
      case 7:
        if (backoff_timer) {
          auto g = *backoff_timer;
          backoff_timer.reset();
          feed(input::timer{timer_kind::backoff, g});
        }
        break;
      case 8:
        if (attempt_timer) {
          auto a = *attempt_timer;
          attempt_timer.reset();
          feed(
            input::timer{timer_kind::attempt, static_cast<std::uint64_t>(a)});
        }
        break;
      case 9:
        feed(input::stop{pick(2) == 0 ? stop_request::cancel
                                      : stop_request::kill});
        break;
      case 10:
        feed(input::force_fallback{});
        break;
      default: {
        // Stale answers for any attempt.
        auto a = static_cast<int>(pick(4));
        switch (pick(3)) {
          case 0:
            feed(input::preflight_done{a, true, 0, false, ""});
            break;
          case 1:
            feed(input::gates_done{a, true, "", 0, false, ""});
            break;
          default:
            feed(input::delivered{a, true, ""});
            break;
        }
        break;
      }
    }
  }
};

} // namespace

TEST_CASE("steps: random inputs never break the machine, and every task "
          "ends exactly once",
          "[task_machine][steps]") {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    supervisor_config cfg;
    cfg.steps.preflight = seed % 2 == 0;
    cfg.steps.gates = seed % 3 != 0;
    cfg.steps.deliver = seed % 5 != 0;
    cfg.attempt_timeout_s = 10;
    cfg.done_exit_code = 99;
    cfg.max_total_attempts = 12;
    if (seed % 4 == 0)
      cfg.restart = restart_type::permanent;
    step_world w{seed, cfg};
    INFO("seed " << seed);
    w.feed(input::start{});
    for (int i = 0; i < 200 && w.t.st.phase != task_phase::done; ++i)
      w.step(false);
    // Left to a cooperative world, the task ends.
    for (int i = 0; i < 20000 && w.t.st.phase != task_phase::done; ++i)
      w.step(true);
    CHECK(w.t.st.phase == task_phase::done);
    CHECK(w.finishes == 1);
    CHECK_FALSE(w.slot);
  }
}

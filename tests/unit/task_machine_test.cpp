// The task machine without an actor system: (state, input) -> (state,
// effects) for docs/BEHAVIOUR.md, and random input sequences that must never
// reach an invalid state and must end every task exactly once.

#include "task_machine_support.hpp"

#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// One task on a machine, fed inputs by hand.
struct task : machine_task {
  explicit task(supervisor_config cfg = {}, std::size_t chain = 2)
    : machine_task(std::move(cfg), chain) {}

  void end(attempt_outcome o) {
    REQUIRE(feed(input::attempt_ended{st.attempt, std::move(o)}));
  }

  void classify(error_class cls) {
    auto ask = only<effect::classify>(fx);
    REQUIRE(feed(input::classified{ask.generation, as(cls)}));
  }

  /// The finish effect of the last input.
  const effect::finish& finished() { return only<effect::finish>(fx); }

  std::string error() {
    auto text = describe(finished(), machine.config());
    return text ? *text : std::string{};
  }
};

} // namespace

TEST_CASE("task machine: a copied state owns its own outcome and plan, a "
          "state holds their room only while they are present",
          "[task_machine]") {
  task_machine_state a;
  CHECK_FALSE(a.ended);
  attempt_outcome o;
  o.exit_code = 3;
  o.tail = {"boom"};
  a.ended = o;
  decision d;
  d.retry_count = 2;
  a.plan = d;
  auto b = a;
  b.ended->exit_code = 4;
  b.plan->retry_count = 5;
  CHECK(a.ended->exit_code == 3);
  CHECK(a.plan->retry_count == 2);
  CHECK(b.ended->tail == std::vector<std::string>{"boom"});
  a = b;
  CHECK(a.ended->exit_code == 4);
  auto taken = a.plan.take();
  REQUIRE(taken.has_value());
  CHECK(taken->retry_count == 5);
  CHECK_FALSE(a.plan);
  CHECK(b.plan->retry_count == 5);
  b.ended.reset();
  CHECK_FALSE(b.ended.has_value());
  // The state a waiting task keeps is small: the rarely present parts
  // are one pointer each while absent.
  CHECK(sizeof(task_machine_state) < 400);
}

TEST_CASE("task machine: a first attempt that succeeds ends the task",
          "[task_machine]") {
  task t;
  REQUIRE(t.feed(input::start{}));
  CHECK(t.st.phase == task_phase::waiting);
  auto ask = only<effect::ask_permission>(t.fx);
  CHECK(ask.need_slot);
  CHECK_FALSE(ask.need_token);
  t.grant();
  CHECK(t.st.phase == task_phase::running);
  CHECK(t.st.holds_slot);
  CHECK(only<effect::start_attempt>(t.fx).attempt == 1);
  t.end(exited(0));
  CHECK(has<effect::release_slot>(t.fx));
  CHECK(only<effect::report_agent>(t.fx).success);
  CHECK(t.finished().outcome == end_kind::succeeded);
  CHECK_FALSE(describe(t.finished(), t.machine.config()));
  CHECK(t.st.phase == task_phase::done);
  CHECK(t.st.counters.total_attempts == 1);
  // Nothing moves a finished task.
  CHECK_FALSE(t.feed(input::stop{stop_request::kill}));
  CHECK(t.fx.empty());
}

TEST_CASE("task machine: a retryable failure is classified, delayed and "
          "retried, and counted only when the retry starts",
          "[task_machine]") {
  task t;
  t.start_running();
  t.end(exited(1));
  CHECK(t.st.phase == task_phase::classifying);
  t.classify(error_class::retryable);
  CHECK_FALSE(only<effect::report_agent>(t.fx).success);
  auto ask = only<effect::ask_delay>(t.fx);
  CHECK(ask.retry_index == 0);
  CHECK(ask.spec.table_s == std::vector<double>{5, 15, 45});
  CHECK_FALSE(ask.hint_s);
  CHECK(t.st.phase == task_phase::delaying);
  CHECK(t.st.counters.retry_count == 0);
  CHECK(task_machine::shown_retry_count(t.st) == 1);
  t.delay(5);
  auto sched = only<effect::retry_scheduled>(t.fx);
  CHECK(sched.plan.retry_count == 1);
  CHECK(describe(sched.plan, t.machine.config()) ==
        "retryable failure (rule \"r\"): retrying (1/3)");
  auto timer = only<effect::set_timer>(t.fx);
  CHECK(timer.kind == timer_kind::backoff);
  CHECK(timer.delay_s == 5);
  CHECK(t.st.retry_at_s == 5);
  // A stale timer does nothing; the current one asks for permission with a
  // retry token.
  CHECK_FALSE(t.feed(input::timer{timer_kind::backoff, timer.generation - 1}));
  REQUIRE(t.feed(input::timer{timer_kind::backoff, timer.generation}));
  auto perm = only<effect::ask_permission>(t.fx);
  CHECK(perm.need_token);
  CHECK(perm.need_slot);
  t.grant();
  CHECK(only<effect::start_attempt>(t.fx).attempt == 2);
  CHECK(t.st.counters.retry_count == 1);
  CHECK(t.st.counters.total_retries == 1);
  CHECK(t.st.counters.retries_by_agent == std::vector<int>{1, 0});
}

TEST_CASE("task machine: the retry-after hint is trusted only from a rate "
          "limit",
          "[task_machine]") {
  for (auto cls : {error_class::rate_limit, error_class::retryable}) {
    task t;
    t.start_running();
    t.end(exited(1));
    auto c = as(cls);
    c.retry_after_s = 20;
    REQUIRE(
      t.feed(input::classified{only<effect::classify>(t.fx).generation, c}));
    auto ask = only<effect::ask_delay>(t.fx);
    if (cls == error_class::rate_limit) {
      CHECK(ask.hint_s == 20);
      CHECK(ask.spec.table_s == std::vector<double>{60, 120, 300});
    } else {
      CHECK_FALSE(ask.hint_s);
    }
  }
}

TEST_CASE("task machine: each class's backoff schedule counts only that "
          "class's retries of the agent",
          "[task_machine]") {
  struct row {
    std::vector<error_class> failures;
    // The schedule step each retry asks for, in order.
    std::vector<int> steps;
  };
  using ec = error_class;
  auto rows = std::vector<row>{
    {{ec::retryable, ec::retryable, ec::rate_limit}, {0, 1, 0}},
    {{ec::rate_limit, ec::retryable, ec::rate_limit}, {0, 0, 1}},
    {{ec::timeout, ec::retryable, ec::timeout}, {0, 0, 1}},
    {{ec::retryable, ec::retryable, ec::retryable}, {0, 1, 2}},
  };
  for (auto& r : rows) {
    task t{supervisor_config{}, 2};
    t.start_running();
    for (std::size_t i = 0; i < r.failures.size(); ++i) {
      t.end(exited(1));
      t.classify(r.failures[i]);
      auto ask = only<effect::ask_delay>(t.fx);
      CHECK(ask.retry_index == r.steps[i]);
      if (r.failures[i] == ec::rate_limit)
        CHECK(ask.spec.table_s == std::vector<double>{60, 120, 300});
      t.delay(1);
      auto timer = only<effect::set_timer>(t.fx);
      REQUIRE(t.feed(input::timer{timer_kind::backoff, timer.generation}));
      t.grant();
    }
  }
  SECTION("a switch to the next agent starts every schedule over") {
    task t;
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::rate_limit);
    t.delay(1);
    REQUIRE(t.feed(input::force_fallback{}));
    t.grant();
    t.end(exited(1));
    t.classify(error_class::rate_limit);
    CHECK(only<effect::ask_delay>(t.fx).retry_index == 0);
  }
}

TEST_CASE("task machine: a stable run starts the backoff over, for "
          "transient and permanent tasks alike",
          "[task_machine]") {
  struct row {
    restart_type restart;
    // How long each failed attempt ran (reset_after_s is 300).
    std::vector<double> ran_s;
    // The schedule step each retry asks for, in order.
    std::vector<int> steps;
  };
  auto rows = std::vector<row>{
    {restart_type::transient, {1, 1, 300, 1}, {0, 1, 0, 1}},
    {restart_type::transient, {1, 299, 1}, {0, 1, 2}},
    {restart_type::transient, {1, 1, 1000, 1000, 1000}, {0, 1, 0, 0, 0}},
    {restart_type::permanent, {1, 1, 300, 1}, {0, 1, 0, 1}},
  };
  for (auto& r : rows) {
    supervisor_config cfg;
    cfg.restart = r.restart;
    cfg.intensity.reset_after_s = 300;
    task t{cfg, 1};
    t.start_running();
    for (std::size_t i = 0; i < r.ran_s.size(); ++i) {
      t.now += r.ran_s[i];
      t.end(exited(1, r.ran_s[i]));
      t.classify(error_class::retryable);
      auto ask = only<effect::ask_delay>(t.fx);
      CHECK(ask.retry_index == r.steps[i]);
      t.delay(1);
      auto timer = only<effect::set_timer>(t.fx);
      REQUIRE(t.feed(input::timer{timer_kind::backoff, timer.generation}));
      t.grant();
      // The retry count shown is the reset one.
      CHECK(t.st.counters.retry_count == r.steps[i] + 1);
    }
  }
}

TEST_CASE("task machine: fatal fails at once without feeding the breaker",
          "[task_machine]") {
  task t;
  t.start_running();
  t.end(exited(1));
  t.classify(error_class::fatal);
  CHECK_FALSE(has<effect::report_agent>(t.fx));
  CHECK(t.finished().outcome == end_kind::failed);
  CHECK(t.error() == "fatal failure (rule \"r\"): action fail, no retry and "
                     "no fallback");
}

TEST_CASE("task machine: an agent failure switches at once and keeps "
          "nothing of the old agent",
          "[task_machine]") {
  task t;
  t.start_running();
  t.end(exited(127));
  t.classify(error_class::agent_failure);
  auto sw = only<effect::agent_switched>(t.fx);
  CHECK(sw.from == 0);
  CHECK(sw.switched.agent_index == 1);
  CHECK(t.st.counters.agent_index == 1);
  CHECK(t.st.counters.fallback_count == 1);
  auto ask = only<effect::ask_permission>(t.fx);
  CHECK(ask.agent_index == 1);
  CHECK_FALSE(ask.need_token);
}

TEST_CASE("task machine: user stops", "[task_machine]") {
  SECTION("during an attempt: stop it, then end as stopped") {
    task t;
    t.start_running();
    REQUIRE(t.feed(input::stop{stop_request::cancel}));
    CHECK(only<effect::stop_attempt>(t.fx).mode == stop_request::cancel);
    CHECK(only<effect::stop_attempt>(t.fx).grace_s == 10);
    CHECK_FALSE(only<effect::user_stopped>(t.fx).skipped_retry);
    // A repeated cancel is accepted and does nothing new; a kill escalates.
    REQUIRE(t.feed(input::stop{stop_request::cancel}));
    CHECK(t.fx.empty());
    REQUIRE(t.feed(input::stop{stop_request::kill}));
    CHECK(only<effect::stop_attempt>(t.fx).mode == stop_request::kill);
    t.end(exited(137));
    CHECK(t.finished().outcome == end_kind::stopped);
    CHECK(t.error() == "stopped by user (kill)");
    CHECK_FALSE(has<effect::classify>(t.fx));
  }
  SECTION("during the backoff: the retry is skipped") {
    task t;
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::retryable);
    t.delay(5);
    REQUIRE(t.feed(input::stop{stop_request::cancel}));
    CHECK(only<effect::user_stopped>(t.fx).skipped_retry);
    CHECK(t.finished().outcome == end_kind::stopped);
    // The task never held a slot in its backoff: nothing to release.
    CHECK_FALSE(has<effect::release_slot>(t.fx));
  }
  SECTION("while queued: the place in the queue is given up") {
    task t;
    REQUIRE(t.feed(input::start{}));
    REQUIRE(t.feed(input::stop{stop_request::kill}));
    CHECK(has<effect::release_slot>(t.fx));
    CHECK(t.finished().outcome == end_kind::stopped);
  }
}

TEST_CASE("task machine: retry_now skips only a backoff", "[task_machine]") {
  task t;
  t.start_running();
  CHECK_FALSE(t.feed(input::retry_now{}));
  t.end(exited(1));
  t.classify(error_class::retryable);
  t.delay(5);
  auto timer = only<effect::set_timer>(t.fx);
  t.now = 2;
  REQUIRE(t.feed(input::retry_now{}));
  CHECK(has<effect::ask_permission>(t.fx));
  // The user's request is told (describe shows it), with the wait it cut.
  CHECK(only<effect::retry_requested>(t.fx).skipped_s == 3);
  // The backoff timer is stale now.
  CHECK_FALSE(t.feed(input::timer{timer_kind::backoff, timer.generation}));
}

TEST_CASE("task machine: force_fallback", "[task_machine]") {
  SECTION("with no agent left, nothing changes") {
    task t{supervisor_config{}, 1};
    t.start_running();
    auto before = t.st;
    CHECK_FALSE(t.feed(input::force_fallback{}));
    CHECK(t.fx.empty());
    CHECK(t.st.phase == before.phase);
    CHECK(t.st.generation == before.generation);
  }
  SECTION("during an attempt: stop it, then switch") {
    task t;
    t.start_running();
    REQUIRE(t.feed(input::force_fallback{}));
    CHECK(only<effect::stop_attempt>(t.fx).mode == stop_request::cancel);
    CHECK_FALSE(t.feed(input::force_fallback{})); // once is enough
    t.end(exited(143));
    auto sw = only<effect::agent_switched>(t.fx);
    CHECK(describe(sw.switched, t.machine.config()) ==
          "fallback forced by user; switching to agent 2 of 2");
    CHECK_FALSE(has<effect::classify>(t.fx));
  }
  SECTION("during a backoff: the planned retry never counts") {
    task t;
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::retryable);
    t.delay(5);
    REQUIRE(t.feed(input::force_fallback{}));
    CHECK(has<effect::agent_switched>(t.fx));
    CHECK(t.st.counters.total_retries == 0);
    CHECK(t.st.counters.retry_count == 0);
    CHECK_FALSE(t.st.plan);
  }
}

TEST_CASE("task machine: the node's permission decides slot, breaker and "
          "budget in one answer",
          "[task_machine]") {
  SECTION("an open breaker skips the agent, naming it") {
    task t;
    REQUIRE(t.feed(input::start{}));
    auto ask = only<effect::ask_permission>(t.fx);
    REQUIRE(t.feed(input::permission{ask.generation, false, true, "a"}));
    auto sw = only<effect::agent_switched>(t.fx);
    CHECK(describe(sw.switched, t.machine.config()) ==
          "circuit breaker open for a; switching to agent 2 of 2");
    // The slot granted with the answer is kept for the next agent.
    CHECK(only<effect::ask_permission>(t.fx).need_slot == false);
    CHECK(t.st.holds_slot);
  }
  SECTION("no retry token: fall back, nothing counted") {
    task t;
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::retryable);
    t.delay(0); // no delay: permission asked at once
    REQUIRE(only<effect::ask_permission>(t.fx).need_token);
    t.grant(true, false);
    auto sw = only<effect::agent_switched>(t.fx);
    CHECK(sw.switched.cause == decision_cause::retry_budget_exhausted);
    CHECK(t.st.counters.total_retries == 0);
    CHECK(t.st.counters.total_attempts == 1);
  }
  SECTION("a failed permission request fails the task") {
    task t;
    REQUIRE(t.feed(input::start{}));
    auto ask = only<effect::ask_permission>(t.fx);
    REQUIRE(t.feed(
      input::reply_failed{ask.generation, request_kind::permission, "gone"}));
    CHECK(t.error() == "no attempt slot: gone");
  }
}

TEST_CASE("task machine: the deadline", "[task_machine]") {
  supervisor_config cfg;
  cfg.deadline_s = 30;
  cfg.stop_grace_s = 5;
  SECTION("during an attempt: cancel it, its exit fails the task") {
    task t{cfg};
    REQUIRE(t.feed(input::start{}));
    auto timer = only<effect::set_timer>(t.fx);
    CHECK(timer.kind == timer_kind::deadline);
    CHECK(timer.delay_s == 30);
    t.grant();
    REQUIRE(t.feed(input::timer{timer_kind::deadline, 0}));
    CHECK(only<effect::deadline_passed>(t.fx).stopping);
    CHECK(only<effect::stop_attempt>(t.fx).grace_s == 5);
    t.end(exited(143));
    CHECK(t.error() == "deadline exceeded (30 s)");
    CHECK_FALSE(has<effect::classify>(t.fx));
  }
  SECTION("during a backoff: fail at once") {
    task t{cfg};
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::retryable);
    t.delay(5);
    REQUIRE(t.feed(input::timer{timer_kind::deadline, 0}));
    CHECK_FALSE(only<effect::deadline_passed>(t.fx).stopping);
    CHECK(t.error() == "deadline exceeded (30 s)");
  }
}

TEST_CASE("task machine: max_total_attempts ends the task before an "
          "attempt",
          "[task_machine]") {
  supervisor_config cfg;
  cfg.max_total_attempts = 1;
  task t{cfg};
  t.start_running();
  t.end(exited(1));
  t.classify(error_class::retryable);
  CHECK(t.finished().outcome == end_kind::failed);
  CHECK(t.error() == "retryable failure (rule \"r\"); max_total_attempts (1) "
                     "reached");
}

TEST_CASE("task machine: an attempt that cannot start again gives up the "
          "agent without a classifier round trip",
          "[task_machine]") {
  task t;
  t.start_running();
  auto o = exited(1);
  o.started = false;
  o.retry_futile = true;
  o.infrastructure_error = "image x not found locally";
  t.end(o);
  CHECK_FALSE(has<effect::classify>(t.fx));
  CHECK(only<effect::classified>(t.fx).result.cls ==
        error_class::agent_failure);
  CHECK(has<effect::agent_switched>(t.fx));
  CHECK(t.st.last_not_started);
}

TEST_CASE("task machine: failed replies", "[task_machine]") {
  SECTION("no classifier: the failure is treated as transient") {
    task t;
    t.start_running();
    t.end(exited(1));
    auto gen = only<effect::classify>(t.fx).generation;
    REQUIRE(t.feed(input::reply_failed{gen, request_kind::classify, "down"}));
    CHECK(only<effect::classified>(t.fx).result.rule ==
          "classifier_unavailable");
    CHECK(has<effect::ask_delay>(t.fx));
  }
  SECTION("no backoff: the task fails, saying so") {
    task t;
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::retryable);
    auto gen = only<effect::ask_delay>(t.fx).generation;
    REQUIRE(t.feed(input::reply_failed{gen, request_kind::delay, "down"}));
    CHECK(t.error() == "backoff unavailable: down");
  }
  SECTION("a stale failure is ignored") {
    task t;
    t.start_running();
    CHECK_FALSE(t.feed(input::reply_failed{0, request_kind::classify, "late"}));
  }
}

TEST_CASE("task machine: a permanent task restarts after exit 0 after its "
          "restart backoff, within its intensity",
          "[task_machine]") {
  supervisor_config cfg;
  cfg.restart = restart_type::permanent;
  cfg.intensity.max_restarts = 1;
  cfg.intensity.period_s = 100;
  task t{cfg, 1};
  t.start_running();
  t.end(exited(0));
  // The restart waits its own schedule (and says so), never at once.
  auto ask = only<effect::ask_delay>(t.fx);
  CHECK(ask.retry_index == 0);
  CHECK(ask.spec.initial_s == cfg.restart_backoff.initial_s);
  t.delay(0);
  // A restart, not a retry: it says which, and how long the run before was.
  CHECK(
    describe(only<effect::retry_scheduled>(t.fx).plan, t.machine.config()) ==
    "permanent task exited 0: restarting (restart 1, ran 1s)");
  CHECK(only<effect::ask_permission>(t.fx).need_token);
  t.grant();
  CHECK(t.st.counters.restarts.count(0) == 1);
  t.now = 1;
  t.end(exited(0));
  CHECK(t.error() == "permanent task exited 0; restart intensity exceeded (1 "
                     "restarts in 100 s)");
}

// -- property: random input sequences ---------------------------------------

namespace {

/// A model of the world around one task: the requests it has open, its
/// timers, its slot. Random steps answer them, fire them (or stale copies),
/// or send the user's controls; every step's effects are checked against
/// the state.
struct world {
  explicit world(std::uint64_t seed, supervisor_config cfg, std::size_t chain)
    : t(std::move(cfg), chain), rng(seed) {}

  task t;
  std::mt19937_64 rng;
  std::optional<effect::ask_permission> permission;
  std::optional<std::uint64_t> classify_gen;
  std::optional<std::uint64_t> delay_gen;
  std::optional<std::uint64_t> backoff_timer;
  std::optional<std::uint64_t> quota_timer;
  bool deadline_timer = false;
  bool slot = false;
  int started = 0;
  int finishes = 0;
  int running = 0;

  std::size_t pick(std::size_t n) { return rng() % n; }

  void apply_effects() {
    for (auto& e : t.fx) {
      if (auto* x = std::get_if<effect::ask_permission>(&e)) {
        REQUIRE(x->agent_index < t.st.counters.chain_size);
        permission = *x;
      } else if (std::holds_alternative<effect::release_slot>(e)) {
        slot = false;
        permission.reset();
      } else if (auto* x = std::get_if<effect::start_attempt>(&e)) {
        REQUIRE(running == 0); // one attempt at a time
        REQUIRE(x->attempt == started + 1);
        ++started;
        running = x->attempt;
      } else if (auto* x = std::get_if<effect::classify>(&e)) {
        classify_gen = x->generation;
      } else if (auto* x = std::get_if<effect::ask_delay>(&e)) {
        REQUIRE(x->retry_index >= 0);
        delay_gen = x->generation;
      } else if (auto* x = std::get_if<effect::set_timer>(&e)) {
        if (x->kind == timer_kind::backoff)
          backoff_timer = x->generation;
        else if (x->kind == timer_kind::quota)
          quota_timer = x->generation;
        else
          deadline_timer = true;
      } else if (std::holds_alternative<effect::finish>(e)) {
        ++finishes;
      }
    }
  }

  void check_invariants() {
    auto& st = t.st;
    auto& c = st.counters;
    REQUIRE(finishes <= 1);
    REQUIRE(c.agent_index < c.chain_size);
    REQUIRE(c.total_attempts == started);
    REQUIRE(c.total_attempts <= t.machine.config().max_total_attempts);
    REQUIRE(c.retry_count <= t.machine.config().max_retries_per_agent);
    REQUIRE(st.attempt == started);
    if (st.phase == task_phase::done) {
      REQUIRE(finishes == 1);
      REQUIRE_FALSE(st.holds_slot);
      REQUIRE_FALSE(slot); // the slot is always given back
    } else {
      REQUIRE(finishes == 0);
    }
    if (st.holds_slot)
      REQUIRE(
        (st.phase == task_phase::waiting || st.phase == task_phase::running));
    if (st.phase == task_phase::running)
      REQUIRE(running == st.attempt);
    if (st.plan)
      REQUIRE(st.plan->step == next_step::retry);
    if (st.phase == task_phase::parked) {
      // Parked holds nothing and asks for nothing.
      REQUIRE_FALSE(st.holds_slot);
      REQUIRE_FALSE(slot);
      REQUIRE_FALSE(permission);
      REQUIRE((st.paused || st.resume_at_s > 0));
    }
  }

  void feed(machine_input in) {
    t.fx.clear();
    t.machine.handle(t.st, std::move(in), t.now, t.fx);
    apply_effects();
    check_invariants();
  }

  /// One random step; `kind` < 0 picks any.
  void step() {
    t.now += static_cast<double>(pick(100)) / 10.0;
    switch (pick(16)) {
      case 0:
        if (permission) {
          auto p = *permission;
          if (p.need_slot)
            slot = true;
          permission.reset();
          feed(
            input::permission{p.generation, pick(8) != 0, pick(4) != 0, "x"});
        }
        break;
      case 1:
      case 2:
        if (running != 0) {
          auto o = exited(static_cast<int>(pick(3)));
          o.retry_futile = pick(20) == 0;
          auto attempt = running;
          running = 0;
          feed(input::attempt_ended{attempt, o});
        }
        break;
      case 3:
        if (classify_gen) {
          auto g = *classify_gen;
          classify_gen.reset();
          auto cls = all_error_classes[pick(all_error_classes.size())];
          feed(input::classified{g, as(cls)});
        }
        break;
      case 4:
        if (delay_gen) {
          auto g = *delay_gen;
          delay_gen.reset();
          delay_decision d;
          d.delay_s = static_cast<double>(pick(3));
          feed(input::delay_decided{g, d});
        }
        break;
      case 5:
        if (backoff_timer) {
          auto g = *backoff_timer;
          backoff_timer.reset();
          feed(input::timer{timer_kind::backoff, g});
        }
        break;
      case 6:
        feed(input::stop{pick(2) == 0 ? stop_request::cancel
                                      : stop_request::kill});
        break;
      case 7:
        feed(input::retry_now{});
        break;
      case 8:
        feed(input::force_fallback{});
        break;
      case 9:
        if (deadline_timer) {
          deadline_timer = false;
          feed(input::timer{timer_kind::deadline, 0});
        }
        break;
      case 10: {
        // A stale or forged reply: any generation, any kind.
        auto g = t.st.generation - pick(3);
        switch (pick(4)) {
          case 0:
            feed(input::permission{g, true, true, "x"});
            break;
          case 1:
            feed(input::classified{g, as(error_class::retryable)});
            break;
          case 2:
            feed(input::delay_decided{g, delay_decision{}});
            break;
          default:
            feed(input::timer{timer_kind::backoff, g});
            break;
        }
        break;
      }
      case 12:
        if (quota_timer) {
          auto g = *quota_timer;
          quota_timer.reset();
          feed(input::timer{timer_kind::quota, g});
        }
        break;
      case 13:
        feed(input::pause{});
        break;
      case 14:
        feed(input::resume{});
        break;
      case 15:
        // The agent's account is closed: no slot comes with the answer.
        if (permission) {
          auto p = *permission;
          permission.reset();
          feed(input::quota_closed{p.generation, "acct",
                                   t.now + static_cast<double>(pick(100))});
        }
        break;
      default:
        if (running != 0 && pick(4) == 0)
          feed(input::attempt_ended{running + 1 + static_cast<int>(pick(3)),
                                    exited(1)});
        break;
    }
  }
};

} // namespace

TEST_CASE("task machine: random input sequences never reach an invalid state "
          "and end every task exactly once",
          "[task_machine][property]") {
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    supervisor_config cfg;
    std::mt19937_64 pick{seed * 7919};
    cfg.max_retries_per_agent = static_cast<int>(pick() % 4);
    cfg.max_total_attempts = 1 + static_cast<int>(pick() % 12);
    cfg.enable_fallback = pick() % 4 != 0;
    cfg.restart = static_cast<restart_type>(pick() % 3);
    cfg.intensity.max_restarts = static_cast<int>(pick() % 5);
    if (pick() % 3 == 0)
      cfg.deadline_s = 50;
    auto chain = 1 + static_cast<std::size_t>(pick() % 3);
    world w{seed, cfg, chain};
    INFO("seed " << seed);
    w.feed(input::start{});
    for (int i = 0; i < 300 && w.t.st.phase != task_phase::done; ++i)
      w.step();
    // Whatever happened so far, a user kill ends the task, once.
    w.feed(input::stop{stop_request::kill});
    if (w.running != 0) {
      auto a = w.running;
      w.running = 0;
      w.feed(input::attempt_ended{a, exited(137)});
    }
    REQUIRE(w.t.st.phase == task_phase::done);
    REQUIRE(w.finishes == 1);
  }
}

TEST_CASE("task machine: left alone with a cooperative world, every task "
          "ends",
          "[task_machine][property]") {
  // Every request answered, every timer fired, every attempt failing in a
  // random class: max_total_attempts bounds the task.
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    supervisor_config cfg;
    cfg.max_total_attempts = 1 + static_cast<int>(seed % 10);
    cfg.restart = static_cast<restart_type>(seed % 3);
    world w{seed, cfg, 1 + seed % 3};
    INFO("seed " << seed);
    w.feed(input::start{});
    for (int i = 0; i < 1000 && w.t.st.phase != task_phase::done; ++i) {
      if (w.permission) {
        auto p = *w.permission;
        w.permission.reset();
        if (p.need_slot)
          w.slot = true;
        w.feed(input::permission{p.generation, true, true, "x"});
      } else if (w.running != 0) {
        auto a = w.running;
        w.running = 0;
        w.feed(input::attempt_ended{a, exited(static_cast<int>(w.pick(2)))});
      } else if (w.classify_gen) {
        auto g = *w.classify_gen;
        w.classify_gen.reset();
        w.feed(input::classified{
          g, as(all_error_classes[w.pick(all_error_classes.size())])});
      } else if (w.delay_gen) {
        auto g = *w.delay_gen;
        w.delay_gen.reset();
        w.feed(input::delay_decided{g, delay_decision{}});
      } else if (w.backoff_timer) {
        auto g = *w.backoff_timer;
        w.backoff_timer.reset();
        w.feed(input::timer{timer_kind::backoff, g});
      } else if (w.quota_timer) {
        auto g = *w.quota_timer;
        w.quota_timer.reset();
        w.feed(input::timer{timer_kind::quota, g});
      }
    }
    REQUIRE(w.t.st.phase == task_phase::done);
    REQUIRE(w.finishes == 1);
  }
}

TEST_CASE("task machine: a fatal failure ends only its provider's agents "
          "with fatal_scope provider",
          "[task_machine]") {
  auto run = [](fatal_scope scope, std::vector<std::string> providers) {
    supervisor_config cfg;
    cfg.fatal = scope;
    task t{cfg, 1};
    t.machine = task_machine{std::make_shared<const supervisor_config>(cfg),
                             std::move(providers)};
    t.st = t.machine.initial();
    t.start_running();
    t.end(exited(1));
    t.classify(error_class::fatal);
    return t;
  };
  SECTION("the next agent of another provider takes over") {
    auto t = run(fatal_scope::provider, {"anthropic", "anthropic", "openai"});
    auto sw = only<effect::agent_switched>(t.fx);
    CHECK(sw.switched.agent_index == 2);
    CHECK(describe(sw.switched, t.machine.config()) ==
          "fatal failure (rule \"r\"): provider anthropic refused, skipping "
          "its agents; switching to agent 3 of 3");
  }
  SECTION("an unknown provider is never assumed independent") {
    auto t = run(fatal_scope::provider, {"anthropic", ""});
    CHECK(t.finished().outcome == end_kind::failed);
  }
  SECTION("scope task ends the task") {
    auto t = run(fatal_scope::task, {"anthropic", "openai"});
    CHECK(t.finished().outcome == end_kind::failed);
    CHECK_THAT(t.error(), Catch::Contains("action fail"));
  }
}

TEST_CASE("task machine: usage and cost are summed over the attempts that "
          "report them",
          "[task_machine]") {
  task t;
  t.start_running();
  auto o = exited(1);
  o.structured.emplace();
  o.structured->usage = token_usage{10, 20, 5};
  o.structured->cost_usd = 0.25;
  t.end(o);
  t.classify(error_class::retryable);
  t.delay(0);
  t.grant();
  auto second = exited(0);
  second.structured.emplace();
  second.structured->usage = token_usage{1, 2, 0};
  t.end(second);
  REQUIRE(t.st.usage);
  CHECK(t.st.usage->input_tokens == 11);
  CHECK(t.st.usage->output_tokens == 22);
  CHECK(t.st.usage->cached_input_tokens == 5);
  CHECK(t.st.cost_usd == 0.25);
}

// -- resumed after a node restart ---------------------------------------------

TEST_CASE("task machine: a resumed task asks again for what it waited for") {
  supervisor_config cfg;
  cfg.deadline_s = 100;
  task t{cfg};
  t.now = 10;
  REQUIRE(t.feed(input::start{}));
  SECTION("queued: it queues again, for a slot") {
    t.now = 20;
    REQUIRE(t.feed(input::resumed{}));
    auto ask = only<effect::ask_permission>(t.fx);
    CHECK(ask.need_slot);
    CHECK(ask.generation == t.st.generation);
    // The deadline counts from the start, not from the restart.
    CHECK(only<effect::set_timer>(t.fx).delay_s == 90);
  }
  SECTION("running: the node counts its slot and adopts the attempt") {
    t.grant();
    t.now = 30;
    REQUIRE(t.feed(input::resumed{}));
    CHECK(has<effect::reclaim_slot>(t.fx));
    auto adopt = only<effect::adopt_attempt>(t.fx);
    CHECK(adopt.attempt == 1);
    CHECK(t.st.phase == task_phase::running);
    // Its end is judged as usual.
    t.end(exited(0));
    CHECK(only<effect::finish>(t.fx).outcome == end_kind::succeeded);
  }
  SECTION("classifying: it classifies again, under a new generation") {
    t.grant();
    t.end(exited(1));
    auto old = only<effect::classify>(t.fx).generation;
    REQUIRE(t.feed(input::resumed{}));
    auto ask = only<effect::classify>(t.fx);
    CHECK(ask.generation != old);
    CHECK_FALSE(t.feed(input::classified{old, as(error_class::retryable)}));
    REQUIRE(
      t.feed(input::classified{ask.generation, as(error_class::retryable)}));
    CHECK(t.st.phase == task_phase::delaying);
  }
  SECTION("in backoff: it waits only the time left") {
    t.grant();
    t.end(exited(1));
    t.classify(error_class::retryable);
    auto ask = only<effect::ask_delay>(t.fx);
    delay_decision d;
    d.delay_s = 30;
    REQUIRE(t.feed(input::delay_decided{ask.generation, d}));
    auto old = only<effect::set_timer>(t.fx).generation;
    t.now += 12;
    REQUIRE(t.feed(input::resumed{}));
    auto timers = all_of<effect::set_timer>(t.fx);
    REQUIRE(timers.size() == 2);
    auto backoff =
      timers[0].kind == timer_kind::backoff ? timers[0] : timers[1];
    CHECK(backoff.delay_s == Approx(18));
    // The old node's timer is stale.
    CHECK_FALSE(t.feed(input::timer{timer_kind::backoff, old}));
    REQUIRE(t.feed(input::timer{timer_kind::backoff, backoff.generation}));
    CHECK(has<effect::ask_permission>(t.fx));
  }
  SECTION("a finished task stays finished") {
    REQUIRE(t.feed(input::stop{stop_request::cancel}));
    CHECK_FALSE(t.feed(input::resumed{}));
    CHECK(t.fx.empty());
  }
}

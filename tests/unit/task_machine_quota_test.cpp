// The task machine with a used-up usage quota (`quota_exhausted`,
// `on_quota`, an account closed for every task) and with the user's pause
// and resume: (state, input) -> (state, effects), no actor system.

#include "task_machine_support.hpp"

#include "tasksup/supervisor/account_quotas.hpp"
#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <utility>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct task : machine_task {
  explicit task(supervisor_config cfg = {}, std::size_t chain = 1)
    : machine_task(std::move(cfg), chain) {}

  /// The running attempt fails and is classified as `c`.
  void fail_as(classification c) {
    REQUIRE(feed(input::attempt_ended{st.attempt, exited(1)}));
    auto ask = only<effect::classify>(fx);
    REQUIRE(feed(input::classified{ask.generation, std::move(c)}));
  }

  /// A quota_exhausted classification that says the quota resets in
  /// `reset_s` seconds (none when nullopt).
  static classification quota(std::optional<double> reset_s) {
    auto c = as(error_class::quota_exhausted, "quota");
    c.retry_after_s = reset_s;
    return c;
  }
};

} // namespace

TEST_CASE("quota: with another agent in the chain a used-up quota falls back "
          "at once, closes the account and spends no retry",
          "[task_machine][quota]") {
  task t{{}, 2};
  t.now = 1000;
  t.start_running();
  t.fail_as(task::quota(7200));
  // Not a failure of the agent's health: the breaker is not fed.
  CHECK_FALSE(has<effect::report_agent>(t.fx));
  auto closed = only<effect::close_account>(t.fx);
  CHECK(closed.agent_index == 0);
  CHECK(closed.resume_at_s == 1000 + 7200);
  auto sw = only<effect::agent_switched>(t.fx);
  CHECK(sw.switched.rule == decision_rule::quota_fallback);
  CHECK(sw.switched.agent_index == 1);
  CHECK(describe(sw.switched, t.machine.config())
          .find("quota_exhausted failure (rule \"quota\")") == 0);
  CHECK(t.st.counters.total_retries == 0);
  // The next agent starts without a retry token.
  CHECK_FALSE(only<effect::ask_permission>(t.fx).need_token);
  CHECK(t.st.phase == task_phase::waiting);
}

TEST_CASE("quota: the last agent of a chain waits for the reset, then runs "
          "again without spending a retry",
          "[task_machine][quota]") {
  task t;
  t.now = 1000;
  t.start_running();
  t.fail_as(task::quota(3600));
  CHECK(t.st.phase == task_phase::parked);
  CHECK(t.st.resume_at_s == 4600);
  CHECK(only<effect::close_account>(t.fx).resume_at_s == 4600);
  auto timer = only<effect::set_timer>(t.fx);
  CHECK(timer.kind == timer_kind::quota);
  CHECK(timer.delay_s == 3600);
  auto wait = only<effect::quota_wait>(t.fx);
  CHECK(wait.why.rule == decision_rule::quota_wait);
  CHECK(describe(wait.why, t.machine.config())
          .find(": waiting for quota reset at ") != std::string::npos);
  CHECK(describe(wait.why, t.machine.config()).find("(in 1h00m)") !=
        std::string::npos);
  // Retry-now has no backoff to skip; a stale timer does nothing.
  CHECK_FALSE(t.feed(input::retry_now{}));
  CHECK_FALSE(t.feed(input::timer{timer_kind::quota, timer.generation - 1}));
  t.now = 4600;
  REQUIRE(t.feed(input::timer{timer_kind::quota, timer.generation}));
  CHECK(t.st.resume_at_s == 0);
  auto ask = only<effect::ask_permission>(t.fx);
  CHECK_FALSE(ask.need_token);
  CHECK(ask.agent_index == 0);
  t.grant();
  CHECK(only<effect::start_attempt>(t.fx).attempt == 2);
  CHECK(t.st.counters.retry_count == 0);
  CHECK(t.st.counters.total_retries == 0);
}

TEST_CASE("quota: on_quota overrides the default, and a missing or huge "
          "reset time is bounded",
          "[task_machine][quota]") {
  SECTION("wait, although another agent is left") {
    supervisor_config cfg;
    cfg.on_quota = quota_action::wait;
    task t{cfg, 2};
    t.start_running();
    t.fail_as(task::quota(60));
    CHECK(t.st.phase == task_phase::parked);
    CHECK(t.st.counters.agent_index == 0);
  }
  SECTION("fallback with no agent left fails the task") {
    supervisor_config cfg;
    cfg.on_quota = quota_action::fallback;
    task t{cfg, 1};
    t.start_running();
    t.fail_as(task::quota(60));
    auto& f = only<effect::finish>(t.fx);
    CHECK(f.outcome == end_kind::failed);
    CHECK(describe(f, t.machine.config())->find("no agent left") !=
          std::string::npos);
  }
  SECTION("no reset time said: quota_wait_s") {
    supervisor_config cfg;
    cfg.quota_wait_s = 900;
    task t{cfg, 1};
    t.start_running();
    t.fail_as(task::quota(std::nullopt));
    CHECK(only<effect::set_timer>(t.fx).delay_s == 900);
  }
  SECTION("a reset further away than a week waits a week") {
    task t;
    t.start_running();
    t.fail_as(task::quota(1e9));
    CHECK(only<effect::set_timer>(t.fx).delay_s == max_quota_wait_s);
  }
  SECTION("actions.quota_exhausted: fail fails at once") {
    supervisor_config cfg;
    cfg.actions[error_class::quota_exhausted] = action::fail;
    task t{cfg, 2};
    t.start_running();
    t.fail_as(task::quota(60));
    CHECK(only<effect::finish>(t.fx).outcome == end_kind::failed);
  }
}

TEST_CASE("quota: an account another task closed is answered at the door: "
          "fall back, or wait without a slot",
          "[task_machine][quota]") {
  SECTION("another agent is left: move on, nothing closed again") {
    task t{{}, 2};
    REQUIRE(t.feed(input::start{}));
    auto ask = only<effect::ask_permission>(t.fx);
    REQUIRE(t.feed(input::quota_closed{ask.generation, "team-key", 500}));
    CHECK_FALSE(has<effect::close_account>(t.fx));
    auto sw = only<effect::agent_switched>(t.fx);
    CHECK(sw.switched.cause == decision_cause::quota_closed);
    CHECK(describe(sw.switched, t.machine.config())
            .find("quota of team-key used up") == 0);
    CHECK(only<effect::ask_permission>(t.fx).agent_index == 1);
    CHECK(t.st.counters.total_attempts == 0);
  }
  SECTION("the last agent: parked until the account reopens") {
    task t;
    t.now = 100;
    REQUIRE(t.feed(input::start{}));
    auto ask = only<effect::ask_permission>(t.fx);
    REQUIRE(t.feed(input::quota_closed{ask.generation, "team-key", 400}));
    CHECK(t.st.phase == task_phase::parked);
    CHECK_FALSE(t.st.holds_slot);
    CHECK_FALSE(has<effect::close_account>(t.fx));
    CHECK(only<effect::set_timer>(t.fx).delay_s == 300);
    // A stale answer is ignored.
    CHECK_FALSE(t.feed(input::quota_closed{ask.generation, "team-key", 900}));
  }
  SECTION("a planned retry keeps its plan and its token for after the reset") {
    task t;
    t.start_running();
    t.fail_as(as(error_class::retryable));
    t.delay(0);
    auto ask = only<effect::ask_permission>(t.fx);
    CHECK(ask.need_token);
    REQUIRE(t.feed(input::quota_closed{ask.generation, "a", t.now + 10}));
    CHECK(t.st.plan);
    auto timer = only<effect::set_timer>(t.fx);
    t.now += 10;
    REQUIRE(t.feed(input::timer{timer_kind::quota, timer.generation}));
    CHECK(only<effect::ask_permission>(t.fx).need_token);
    t.grant();
    CHECK(t.st.counters.retry_count == 1);
  }
}

TEST_CASE("pause: nothing starts while paused, resume goes on where the task "
          "was",
          "[task_machine][pause]") {
  SECTION("paused in a backoff, resumed with the time it had left") {
    task t;
    t.now = 10;
    t.start_running();
    t.fail_as(as(error_class::retryable));
    t.delay(30);
    CHECK(t.st.phase == task_phase::backoff);
    t.now = 20;
    REQUIRE(t.feed(input::pause{}));
    CHECK(only<effect::task_paused>(t.fx).parked);
    CHECK(t.st.phase == task_phase::parked);
    CHECK_FALSE(t.feed(input::pause{})); // already paused
    t.now = 100;
    REQUIRE(t.feed(input::resume{}));
    CHECK(has<effect::task_resumed>(t.fx));
    // The backoff ended while paused: the retry is asked for at once.
    CHECK(only<effect::ask_permission>(t.fx).need_token);
    CHECK_FALSE(t.feed(input::resume{}));
  }
  SECTION("resumed before the backoff is over: the rest of it") {
    task t;
    t.start_running();
    t.fail_as(as(error_class::retryable));
    t.delay(30);
    auto old_timer = only<effect::set_timer>(t.fx);
    t.now += 10;
    REQUIRE(t.feed(input::pause{}));
    // The backoff's timer no longer starts anything.
    CHECK_FALSE(
      t.feed(input::timer{timer_kind::backoff, old_timer.generation}));
    t.now += 5;
    REQUIRE(t.feed(input::resume{}));
    CHECK(t.st.phase == task_phase::backoff);
    CHECK(only<effect::set_timer>(t.fx).delay_s == 15);
  }
  SECTION("paused while queued: out of the queue") {
    task t;
    REQUIRE(t.feed(input::start{}));
    auto ask = only<effect::ask_permission>(t.fx);
    REQUIRE(t.feed(input::pause{}));
    CHECK(has<effect::release_slot>(t.fx));
    CHECK(t.st.phase == task_phase::parked);
    // The answer to the old request is stale.
    CHECK_FALSE(t.feed(input::permission{ask.generation, true, true, "a"}));
    REQUIRE(t.feed(input::resume{}));
    CHECK(only<effect::ask_permission>(t.fx).need_slot);
  }
  SECTION("paused while running: the attempt finishes, the next one waits") {
    task t;
    t.start_running();
    REQUIRE(t.feed(input::pause{}));
    CHECK_FALSE(only<effect::task_paused>(t.fx).parked);
    CHECK(t.st.phase == task_phase::running);
    t.fail_as(as(error_class::retryable));
    t.delay(0);
    CHECK(t.st.phase == task_phase::parked);
    CHECK_FALSE(has<effect::ask_permission>(t.fx));
    REQUIRE(t.feed(input::resume{}));
    CHECK(only<effect::ask_permission>(t.fx).need_token);
  }
  SECTION("a paused task can still be stopped and finishes once") {
    task t;
    REQUIRE(t.feed(input::start{}));
    REQUIRE(t.feed(input::pause{}));
    REQUIRE(t.feed(input::stop{stop_request::cancel}));
    CHECK(only<effect::finish>(t.fx).outcome == end_kind::stopped);
    CHECK_FALSE(t.feed(input::resume{}));
  }
  SECTION("a success while paused still ends the task") {
    task t;
    t.start_running();
    REQUIRE(t.feed(input::pause{}));
    REQUIRE(t.feed(input::attempt_ended{t.st.attempt, exited(0)}));
    CHECK(only<effect::finish>(t.fx).outcome == end_kind::succeeded);
  }
  SECTION("paused during a quota wait: the reset does not start it") {
    task t;
    t.start_running();
    t.fail_as(task::quota(60));
    auto timer = only<effect::set_timer>(t.fx);
    REQUIRE(t.feed(input::pause{}));
    t.now += 60;
    REQUIRE(t.feed(input::timer{timer_kind::quota, timer.generation}));
    CHECK_FALSE(has<effect::ask_permission>(t.fx));
    CHECK(t.st.phase == task_phase::parked);
    REQUIRE(t.feed(input::resume{}));
    CHECK(has<effect::ask_permission>(t.fx));
  }
}

TEST_CASE("quota and pause: a restarted node resumes the wait for the time "
          "left, and a paused task stays paused",
          "[task_machine][quota][pause]") {
  SECTION("quota wait") {
    task t;
    t.now = 0;
    t.start_running();
    t.fail_as(task::quota(600));
    t.now = 200;
    REQUIRE(t.feed(input::resumed{}));
    auto timer = only<effect::set_timer>(t.fx);
    CHECK(timer.kind == timer_kind::quota);
    CHECK(timer.delay_s == 400);
    CHECK(timer.generation == t.st.generation);
  }
  SECTION("paused") {
    task t;
    REQUIRE(t.feed(input::start{}));
    REQUIRE(t.feed(input::pause{}));
    REQUIRE(t.feed(input::resumed{}));
    CHECK(t.fx.empty());
    CHECK(t.st.phase == task_phase::parked);
  }
}

TEST_CASE("account quotas: one closing answer closes an account until its "
          "reset, the table stays bounded and survives a restart",
          "[quota]") {
  account_quotas q;
  q.close("claude", 500, 100);
  CHECK(q.closed_until("claude", 100) == 500);
  CHECK(q.closed_until("codex", 100) == 0);
  // A later reset wins; an earlier one never reopens sooner.
  q.close("claude", 800, 110);
  q.close("claude", 300, 120);
  CHECK(q.closed_until("claude", 120) == 800);
  // Open again once the reset has passed.
  CHECK(q.closed_until("claude", 800) == 0);
  // Nothing in the past, no bad names.
  q.close("gemini", 50, 100);
  q.close("", 900, 100);
  q.close(std::string("a\nb"), 900, 100);
  CHECK(q.closed(100).size() == 1);

  account_quotas copy;
  copy.restore(q.save() + "broken line\n\t12\nx\tnan\ny\t1e3junk\n");
  CHECK(copy.closed(100) == q.closed(100));

  account_quotas full;
  for (std::size_t i = 0; i < account_quotas::max_accounts + 10; ++i)
    full.close("acct-" + std::to_string(i), 1000, 0);
  CHECK(full.closed(0).size() == account_quotas::max_accounts);
  // Expired ones make room.
  full.close("late", 2000, 1000);
  CHECK(full.closed_until("late", 1000) == 2000);
}

#include "tasksup/supervisor/supervision_policy.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>

using namespace tasksup;
using Catch::Contains;

namespace {

attempt_outcome failed(int exit_code = 1, double duration_s = 1) {
  attempt_outcome out;
  out.exit_code = exit_code;
  out.duration_s = duration_s;
  return out;
}

attempt_outcome succeeded(double duration_s = 1) {
  attempt_outcome out;
  out.duration_s = duration_s;
  return out;
}

classification classified(error_class cls, std::string rule = "r",
                          std::string line = "") {
  classification out;
  out.cls = cls;
  out.rule = std::move(rule);
  out.line = std::move(line);
  return out;
}

/// A decision and its words.
struct judged : decision {
  std::string reason;
};

/// The policy driven the way these tests read best: every decision is
/// carried out as soon as it is made (the task machine carries out a retry
/// only when its attempt starts; the machine's own tests cover that).
class driver {
public:
  explicit driver(supervisor_config cfg) : pol_(std::move(cfg)) {}

  explicit driver(std::shared_ptr<const supervisor_config> cfg)
    : pol_(std::move(cfg)) {}

  const supervision_policy& policy() const { return pol_; }

  const supervisor_config& config() const { return pol_.config(); }

  supervision_state initial_state(std::size_t n) const {
    return pol_.initial_state(n);
  }

  /// Counts an attempt, or says why none may start.
  std::optional<std::string> start_attempt(supervision_state& st) const {
    if (!pol_.may_start(st))
      return pol_.attempts_exhausted_reason();
    pol_.count_attempt(st);
    return std::nullopt;
  }

  judged on_exit(supervision_state& st, const attempt_outcome& out,
                 const std::optional<classification>& cls, double now) const {
    return carry(st, pol_.on_exit(st, out, cls, now));
  }

  judged skip_agent(supervision_state& st, decision_cause cause,
                    std::string agent = {}) const {
    return carry(st, pol_.skip_agent(st, cause, std::move(agent)));
  }

  judged on_retry_denied(supervision_state& st) const {
    return carry(st, pol_.on_retry_denied(st));
  }

  judged carry(supervision_state& st, decision d) const {
    pol_.apply(st, d);
    judged out;
    static_cast<decision&>(out) = std::move(d);
    out.reason = describe(out, pol_.config());
    return out;
  }

private:
  supervision_policy pol_;
};

/// Starts an attempt and lets it fail with `cls` at `now`.
judged fail_attempt(const driver& pol, supervision_state& st, error_class cls,
                    double now = 0, double duration = 1) {
  auto refused = pol.start_attempt(st);
  REQUIRE_FALSE(refused);
  return pol.on_exit(st, failed(1, duration), classified(cls), now);
}

supervisor_config config() {
  return supervisor_config{};
}

} // namespace

TEST_CASE("success ends a transient task") {
  driver pol{config()};
  auto st = pol.initial_state(2);
  REQUIRE_FALSE(pol.start_attempt(st));
  auto d = pol.on_exit(st, succeeded(), std::nullopt, 0);
  CHECK(d.step == next_step::succeed);
  CHECK_THAT(d.reason, Contains("exit 0"));
  CHECK(st.total_attempts == 1);
  CHECK(st.retry_count == 0);
}

TEST_CASE("exit 0 succeeds even when the memory cgroup saw an OOM kill") {
  driver pol{config()};
  auto st = pol.initial_state(2);
  REQUIRE_FALSE(pol.start_attempt(st));
  auto out = succeeded();
  out.oom_killed = true; // a helper process was killed; the agent recovered
  CHECK(out.succeeded());
  CHECK(pol.on_exit(st, out, std::nullopt, 0).step == next_step::succeed);
}

TEST_CASE("retryable failures retry up to max_retries_per_agent, then fall "
          "back") {
  driver pol{config()};
  auto st = pol.initial_state(3);
  for (int i = 1; i <= 3; ++i) {
    auto d = fail_attempt(pol, st, error_class::retryable);
    REQUIRE(d.step == next_step::retry);
    CHECK(d.retry_count == i);
    CHECK(d.backoff_class == error_class::retryable);
    CHECK(d.agent_index == 0);
    CHECK_THAT(d.reason, Contains("retrying (" + std::to_string(i) + "/3)"));
    CHECK(st.retry_count == i);
    CHECK(st.total_retries == i);
  }
  auto d = fail_attempt(pol, st, error_class::retryable);
  CHECK(d.step == next_step::switch_agent);
  CHECK(d.agent_index == 1);
  CHECK_THAT(d.reason, Contains("retries exhausted (3/3)"));
  CHECK(st.agent_index == 1);
  CHECK(st.retry_count == 0);
  CHECK(st.total_retries == 3);
  CHECK(st.fallback_count == 1);
  CHECK(st.total_attempts == 4);
  SECTION("the new agent gets its own retries") {
    d = fail_attempt(pol, st, error_class::retryable);
    CHECK(d.step == next_step::retry);
    CHECK(d.retry_count == 1);
    CHECK(st.total_retries == 4);
  }
  SECTION("the last agent exhausted fails the task") {
    for (int i = 0; i < 3; ++i)
      REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
              next_step::retry);
    REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
            next_step::switch_agent);
    for (int i = 0; i < 3; ++i)
      REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
              next_step::retry);
    d = fail_attempt(pol, st, error_class::retryable);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("retries exhausted (3/3)") &&
                           Contains("no agent left"));
    CHECK(st.agent_index == 2);
    CHECK(st.fallback_count == 2);
    CHECK(st.total_attempts == 12);
  }
}

TEST_CASE("default actions per class") {
  driver pol{config()};
  auto st = pol.initial_state(2);
  SECTION("fatal fails at once, naming class, rule and line") {
    REQUIRE_FALSE(pol.start_attempt(st));
    auto d = pol.on_exit(
      st, failed(1),
      classified(error_class::fatal, "fatal", "Error: authentication failed"),
      0);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("fatal") && Contains("\"fatal\"") &&
                           Contains("authentication failed"));
    CHECK(st.retry_count == 0);
    CHECK(st.fallback_count == 0);
  }
  SECTION("agent_failure falls back at once") {
    auto d = fail_attempt(pol, st, error_class::agent_failure);
    CHECK(d.step == next_step::switch_agent);
    CHECK(d.agent_index == 1);
    CHECK_THAT(d.reason, Contains("agent_failure"));
    CHECK(st.total_retries == 0);
  }
  SECTION("rate_limit retries with its own backoff class") {
    auto d = fail_attempt(pol, st, error_class::rate_limit);
    CHECK(d.step == next_step::retry);
    CHECK(d.backoff_class == error_class::rate_limit);
  }
  SECTION("infrastructure retries with the standard backoff") {
    auto d = fail_attempt(pol, st, error_class::infrastructure);
    CHECK(d.step == next_step::retry);
    CHECK(d.backoff_class == error_class::infrastructure);
  }
  SECTION("container_crash retries once") {
    auto d = fail_attempt(pol, st, error_class::container_crash);
    CHECK(d.step == next_step::retry);
    CHECK(d.backoff_class == error_class::container_crash);
    CHECK(st.crash_restarts == 1);
  }
  SECTION("a failure without classification is treated as retryable") {
    REQUIRE_FALSE(pol.start_attempt(st));
    auto d = pol.on_exit(st, failed(3), std::nullopt, 0);
    CHECK(d.step == next_step::retry);
    CHECK(d.backoff_class == error_class::retryable);
  }
}

TEST_CASE("custom actions replace the defaults") {
  auto cfg = config();
  cfg.actions[error_class::retryable] = action::fail;
  cfg.actions[error_class::fatal] = action::retry;
  cfg.actions[error_class::rate_limit] = action::fallback;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  SECTION("retryable -> fail") {
    auto d = fail_attempt(pol, st, error_class::retryable);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("retryable") && Contains("fail"));
  }
  SECTION("fatal -> retry") {
    CHECK(fail_attempt(pol, st, error_class::fatal).step == next_step::retry);
  }
  SECTION("rate_limit -> fallback") {
    auto d = fail_attempt(pol, st, error_class::rate_limit);
    CHECK(d.step == next_step::switch_agent);
    CHECK(st.fallback_count == 1);
  }
}

TEST_CASE("max_retries_per_agent 0 falls back on the first failure") {
  auto cfg = config();
  cfg.max_retries_per_agent = 0;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  auto d = fail_attempt(pol, st, error_class::retryable);
  CHECK(d.step == next_step::switch_agent);
  CHECK_THAT(d.reason, Contains("retries exhausted (0/0)"));
}

TEST_CASE("with fallback disabled, exhaustion and fallback actions fail") {
  auto cfg = config();
  cfg.enable_fallback = false;
  cfg.max_retries_per_agent = 1;
  driver pol{cfg};
  auto st = pol.initial_state(3);
  SECTION("retries exhausted") {
    REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
            next_step::retry);
    auto d = fail_attempt(pol, st, error_class::retryable);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("retries exhausted (1/1)") &&
                           Contains("fallback is disabled"));
    CHECK(st.agent_index == 0);
  }
  SECTION("agent_failure") {
    auto d = fail_attempt(pol, st, error_class::agent_failure);
    CHECK(d.step == next_step::fail);
    CHECK(st.fallback_count == 0);
  }
}

TEST_CASE("max_total_attempts stops the task at the exact boundary") {
  auto cfg = config();
  cfg.max_total_attempts = 3;
  cfg.max_retries_per_agent = 10;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  CHECK(fail_attempt(pol, st, error_class::retryable).step == next_step::retry);
  CHECK(fail_attempt(pol, st, error_class::retryable).step == next_step::retry);
  CHECK(st.total_attempts == 2);
  SECTION("the last allowed attempt fails instead of retrying") {
    auto d = fail_attempt(pol, st, error_class::retryable);
    CHECK(st.total_attempts == 3);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("max_total_attempts (3) reached"));
    CHECK(st.retry_count == 2); // the refused retry is not counted
    CHECK(st.total_retries == 2);
  }
  SECTION("nor falls back") {
    auto d = fail_attempt(pol, st, error_class::agent_failure);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("max_total_attempts (3) reached"));
    CHECK(st.agent_index == 0);
    CHECK(st.fallback_count == 0);
  }
  SECTION("start_attempt refuses a fourth attempt") {
    REQUIRE_FALSE(pol.start_attempt(st));
    auto refused = pol.start_attempt(st);
    REQUIRE(refused);
    CHECK(*refused == "max_total_attempts (3) reached");
    CHECK(st.total_attempts == 3);
  }
}

TEST_CASE("container crashes restart at most max_crash_restarts per task") {
  driver pol{config()};
  auto st = pol.initial_state(3);
  REQUIRE(fail_attempt(pol, st, error_class::container_crash).step ==
          next_step::retry);
  CHECK(st.crash_restarts == 1);
  auto d = fail_attempt(pol, st, error_class::container_crash);
  CHECK(d.step == next_step::switch_agent);
  CHECK_THAT(d.reason, Contains("container crash restarts exhausted (1/1)"));
  CHECK(st.agent_index == 1);
  SECTION("the cap is per task: the next agent's crash falls back at once") {
    d = fail_attempt(pol, st, error_class::container_crash);
    CHECK(d.step == next_step::switch_agent);
    CHECK(st.agent_index == 2);
    d = fail_attempt(pol, st, error_class::container_crash);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("no agent left"));
  }
  SECTION("other classes still retry on the new agent") {
    CHECK(fail_attempt(pol, st, error_class::retryable).step ==
          next_step::retry);
  }
}

TEST_CASE("max_crash_restarts 0 falls back on the first crash") {
  auto cfg = config();
  cfg.max_crash_restarts = 0;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  auto d = fail_attempt(pol, st, error_class::container_crash);
  CHECK(d.step == next_step::switch_agent);
  CHECK_THAT(d.reason, Contains("(0/0)"));
}

TEST_CASE("temporary tasks are never restarted") {
  auto cfg = config();
  cfg.restart = restart_type::temporary;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  SECTION("success succeeds") {
    REQUIRE_FALSE(pol.start_attempt(st));
    CHECK(pol.on_exit(st, succeeded(), std::nullopt, 0).step ==
          next_step::succeed);
  }
  for (auto cls : all_error_classes) {
    if (cls == error_class::not_now)
      continue; // not a failure to restart: it parks (below)
    DYNAMIC_SECTION("a failure of class " << to_string(cls) << " fails") {
      auto d = fail_attempt(pol, st, cls);
      CHECK(d.step == next_step::fail);
      CHECK_THAT(d.reason, Contains("temporary"));
      CHECK(st.fallback_count == 0);
    }
  }
  SECTION("a not_now parks it, spending nothing") {
    auto d = fail_attempt(pol, st, error_class::not_now);
    CHECK(d.step == next_step::wait_not_now);
    CHECK(d.rule == decision_rule::not_now);
    CHECK(st.retry_count == 0);
  }
}

TEST_CASE("permanent tasks restart after success within the intensity") {
  auto cfg = config();
  cfg.restart = restart_type::permanent;
  cfg.intensity.max_restarts = 2;
  cfg.intensity.period_s = 100;
  driver pol{cfg};
  auto st = pol.initial_state(1);
  auto run = [&](double now) {
    REQUIRE_FALSE(pol.start_attempt(st));
    return pol.on_exit(st, succeeded(), std::nullopt, now);
  };
  auto d = run(0);
  CHECK(d.step == next_step::retry);
  CHECK_FALSE(d.backoff_class); // no backoff after a clean exit
  CHECK(st.retry_count == 0);
  CHECK(st.total_retries == 0);
  CHECK(run(1).step == next_step::retry);
  SECTION("one restart too many within the period fails") {
    d = run(2);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason,
               Contains("restart intensity exceeded (2 restarts in 100 s)"));
  }
  SECTION("restarts older than the period no longer count") {
    CHECK(run(100.5).step == next_step::retry);
    CHECK(run(101.5).step == next_step::retry);
    CHECK(run(102).step == next_step::fail);
  }
  SECTION("failure retries count against the intensity too") {
    d = fail_attempt(pol, st, error_class::retryable, 2);
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("restart intensity exceeded"));
    CHECK(st.retry_count == 0);
  }
}

TEST_CASE("a permanent task's restart after exit 0 says it restarts, and "
          "whether the run before was stable") {
  auto cfg = config();
  cfg.restart = restart_type::permanent;
  cfg.intensity.reset_after_s = 120;
  driver pol{cfg};
  auto st = pol.initial_state(1);
  REQUIRE_FALSE(pol.start_attempt(st));
  auto d = pol.on_exit(st, succeeded(4), std::nullopt, 0);
  CHECK(d.rule == decision_rule::restart);
  CHECK(d.ran_s == 4);
  CHECK(d.reason == "permanent task exited 0: restarting (restart 1, ran 4s)");
  REQUIRE_FALSE(pol.start_attempt(st));
  d = pol.on_exit(st, succeeded(125), std::nullopt, 200);
  CHECK(d.reason ==
        "permanent task exited 0: restarting (restart 2, ran 2m05s stably)");
  CHECK(d.retry_count == 0);
}

TEST_CASE("permanent tasks reset their retries after a stable run") {
  auto cfg = config();
  cfg.restart = restart_type::permanent;
  cfg.intensity.reset_after_s = 300;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  REQUIRE(fail_attempt(pol, st, error_class::retryable, 0).step ==
          next_step::retry);
  REQUIRE(fail_attempt(pol, st, error_class::retryable, 10).step ==
          next_step::retry);
  CHECK(st.retry_count == 2);
  SECTION("an attempt that ran reset_after_s starts the backoff over") {
    auto d = fail_attempt(pol, st, error_class::retryable, 400, 300);
    CHECK(d.step == next_step::retry);
    CHECK(d.retry_count == 1);
    CHECK(st.total_retries == 3);
  }
  SECTION("a shorter run does not") {
    auto d = fail_attempt(pol, st, error_class::retryable, 400, 299.9);
    CHECK(d.step == next_step::retry);
    CHECK(d.retry_count == 3);
    d = fail_attempt(pol, st, error_class::retryable, 500, 1);
    CHECK(d.step == next_step::switch_agent);
  }
}

TEST_CASE("transient tasks reset their retries after a stable run") {
  auto cfg = config();
  cfg.intensity.reset_after_s = 300;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  for (int i = 0; i < 3; ++i)
    REQUIRE(fail_attempt(pol, st, error_class::retryable, i).step ==
            next_step::retry);
  CHECK(st.retry_count == 3);
  SECTION("a failure after a stable run retries from the first step again") {
    auto d = fail_attempt(pol, st, error_class::retryable, 400, 300);
    CHECK(d.step == next_step::retry);
    CHECK(d.reset_retries);
    CHECK(d.retry_count == 1);
    CHECK(
      st.retries_by_class[static_cast<std::size_t>(error_class::retryable)] ==
      1);
    CHECK(st.total_retries == 4);
  }
  SECTION("stable runs keep it retrying, each a first retry") {
    for (int i = 0; i < 5; ++i) {
      auto d = fail_attempt(pol, st, error_class::retryable, 400 + i, 1000);
      CHECK(d.step == next_step::retry);
      CHECK(d.retry_count == 1);
    }
  }
  SECTION("a short run is counted: its agent's retries are exhausted") {
    auto d = fail_attempt(pol, st, error_class::retryable, 400, 299.9);
    CHECK(d.step == next_step::switch_agent);
    CHECK_THAT(d.reason, Contains("retries exhausted (3/3)"));
  }
  SECTION("a temporary task fails however long it ran") {
    auto tcfg = config();
    tcfg.restart = restart_type::temporary;
    driver temporary{tcfg};
    auto ts = temporary.initial_state(2);
    auto d = fail_attempt(temporary, ts, error_class::retryable, 0, 1000);
    CHECK(d.step == next_step::fail);
    CHECK_FALSE(d.reset_retries);
  }
}

TEST_CASE("a retry denied by the budget was never counted and falls back") {
  driver pol{config()};
  auto st = pol.initial_state(2);
  REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
          next_step::retry);
  REQUIRE_FALSE(pol.start_attempt(st));
  // Deciding a retry changes nothing: it is applied when its attempt starts.
  auto before = st;
  auto planned = pol.policy().on_exit(
    st, failed(), classified(error_class::container_crash), 0);
  REQUIRE(planned.step == next_step::retry);
  CHECK(planned.retry_count == 2);
  CHECK(st.retry_count == before.retry_count);
  CHECK(st.crash_restarts == 0);
  auto d = pol.on_retry_denied(st);
  CHECK(d.step == next_step::switch_agent);
  CHECK(d.agent_index == 1);
  CHECK(d.cause == decision_cause::retry_budget_exhausted);
  CHECK_THAT(d.reason, Contains("retry budget exhausted"));
  CHECK(st.retry_count == 0);
  CHECK(st.total_retries == 1);
  CHECK(st.crash_restarts == 0);
  CHECK(st.fallback_count == 1);
  SECTION("on the last agent it fails") {
    REQUIRE_FALSE(pol.start_attempt(st));
    auto next =
      pol.policy().on_exit(st, failed(), classified(error_class::retryable), 0);
    REQUIRE(next.step == next_step::retry);
    d = pol.on_retry_denied(st);
    CHECK(d.step == next_step::fail);
    CHECK(d.limit == decision_limit::no_agent_left);
    CHECK_THAT(d.reason, Contains("retry budget exhausted"));
    CHECK(st.total_retries == 1);
  }
}

TEST_CASE("a restart of a permanent task is recorded only when applied") {
  auto cfg = config();
  cfg.restart = restart_type::permanent;
  cfg.intensity.max_restarts = 1;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  REQUIRE_FALSE(pol.start_attempt(st));
  auto planned =
    pol.policy().on_exit(st, failed(), classified(error_class::retryable), 0);
  REQUIRE(planned.step == next_step::retry);
  CHECK(planned.restarts == 1);
  CHECK(st.restarts.count(0) == 0); // decided, not yet carried out
  REQUIRE(pol.on_retry_denied(st).step == next_step::switch_agent);
  CHECK(st.restarts.count(0) == 0);
  CHECK(fail_attempt(pol, st, error_class::retryable, 1).step ==
        next_step::retry);
  CHECK(st.restarts.count(1) == 1);
}

TEST_CASE("skip_agent moves past the current agent") {
  auto cfg = config();
  cfg.enable_fallback = false;
  driver pol{cfg};
  auto st = pol.initial_state(2);
  SECTION("even with fallback disabled") {
    auto d = pol.skip_agent(st, decision_cause::user_fallback);
    CHECK(d.step == next_step::switch_agent);
    CHECK(d.agent_index == 1);
    CHECK(d.reason == "fallback forced by user; switching to agent 2 of 2");
    CHECK(st.fallback_count == 1);
    SECTION("and fails when no agent is left") {
      d = pol.skip_agent(st, decision_cause::breaker_open, "b");
      CHECK(d.step == next_step::fail);
      CHECK(d.reason ==
            "circuit breaker open for b; no agent left in the chain");
      CHECK(st.agent_index == 1);
    }
  }
  SECTION("a retry that already started stays counted") {
    REQUIRE(fail_attempt(pol, st, error_class::retryable).step ==
            next_step::retry);
    REQUIRE_FALSE(pol.start_attempt(st));
    pol.skip_agent(st, decision_cause::user_fallback);
    CHECK(st.total_retries == 1);
    CHECK(st.retries_by_agent == std::vector<int>{1, 0});
  }
  SECTION("it respects max_total_attempts") {
    auto capped = config();
    capped.max_total_attempts = 1;
    driver cp{capped};
    auto cs = cp.initial_state(2);
    REQUIRE_FALSE(cp.start_attempt(cs));
    auto d = cp.skip_agent(cs, decision_cause::breaker_open, "a");
    CHECK(d.step == next_step::fail);
    CHECK_THAT(d.reason, Contains("max_total_attempts (1) reached"));
  }
}

TEST_CASE("initial state and step names") {
  driver pol{config()};
  auto st = pol.initial_state(0);
  CHECK(st.chain_size == 1);
  CHECK(st.total_attempts == 0);
  CHECK(st.restarts.max_restarts() == 10);
  CHECK(to_string(next_step::succeed) == "succeed");
  CHECK(to_string(next_step::retry) == "retry");
  CHECK(to_string(next_step::switch_agent) == "switch_agent");
  CHECK(to_string(next_step::fail) == "fail");
}

TEST_CASE("policies sharing one config decide like one holding a copy") {
  auto cfg = config();
  cfg.max_retries_per_agent = 1;
  cfg.actions[error_class::agent_failure] = action::retry;
  auto shared = std::make_shared<const supervisor_config>(cfg);
  driver own{cfg};
  driver first{shared};
  driver second{shared};
  CHECK(&first.config() == &second.config()); // one copy between them
  CHECK(&own.config() != shared.get());
  auto st_own = own.initial_state(2);
  auto st_first = first.initial_state(2);
  auto st_second = second.initial_state(2);
  for (auto cls : {error_class::agent_failure, error_class::agent_failure,
                   error_class::retryable}) {
    auto expected = fail_attempt(own, st_own, cls);
    for (auto [pol, st] :
         {std::pair{&first, &st_first}, std::pair{&second, &st_second}}) {
      auto d = fail_attempt(*pol, *st, cls);
      CHECK(d.step == expected.step);
      CHECK(d.reason == expected.reason);
      CHECK(d.agent_index == expected.agent_index);
      CHECK(d.retry_count == expected.retry_count);
      CHECK(st->agent_index == st_own.agent_index);
      CHECK(st->retry_count == st_own.retry_count);
    }
  }
  // The retry, the switch once its one retry was used, then a retry of b.
  CHECK(st_own.agent_index == 1);
  CHECK(st_own.fallback_count == 1);
}

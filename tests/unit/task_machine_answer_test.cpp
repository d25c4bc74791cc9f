// The task machine with a checked answer (issue 34): an attempt that exits
// 0 succeeds only once its answer passed its schema; a missing or invalid
// answer is `invalid_output`, retried with the standard backoff.

#include "task_machine_support.hpp"

#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>

using namespace tasksup;
using namespace tasksup::test;

namespace {

struct task : machine_task {
  explicit task(supervisor_config cfg, std::size_t chain = 1)
    : machine_task(std::move(cfg), chain) {}

  void start() {
    REQUIRE(feed(input::start{}));
    grant();
  }

  void answer(bool ok, std::string text, std::string errors = {}) {
    REQUIRE(feed(input::answer_checked{st.attempt, ok, std::move(text),
                                       std::move(errors)}));
  }

  void end(attempt_outcome o) {
    input::attempt_ended in;
    in.attempt = st.attempt;
    in.outcome = std::move(o);
    REQUIRE(feed(std::move(in)));
  }
};

supervisor_config checked() {
  supervisor_config cfg;
  cfg.steps.answer = true;
  return cfg;
}

} // namespace

TEST_CASE("answer: an attempt whose answer passed succeeds and keeps it",
          "[task_machine][answer]") {
  task t{checked()};
  t.start();
  t.answer(true, R"({"plan":"x"})");
  t.end(exited(0));
  CHECK(only<effect::finish>(t.fx).outcome == end_kind::succeeded);
  REQUIRE(t.st.answer);
  CHECK(t.st.answer->answer == R"({"plan":"x"})");
  CHECK(t.st.answer->attempt == 1);
}

TEST_CASE("answer: an invalid answer is invalid_output, retried with the "
          "standard backoff, then the next answer counts",
          "[task_machine][answer]") {
  task t{checked()};
  t.start();
  t.answer(false, R"({"plan":1})",
           "/plan: Value type not permitted by 'type' constraint.\n/: x");
  t.end(exited(0));
  auto& c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::invalid_output);
  CHECK(c.rule == "answer_schema");
  // The first error; the feedback carries them all.
  CHECK(c.line == "/plan: Value type not permitted by 'type' constraint.");
  CHECK_FALSE(has<effect::finish>(t.fx));
  CHECK(only<effect::ask_delay>(t.fx).spec.table_s ==
        standard_backoff(5.0).table_s);
  t.delay(5);
  REQUIRE(t.feed(input::timer{timer_kind::backoff, t.st.generation}));
  t.grant();
  REQUIRE(t.st.attempt == 2);
  t.answer(true, R"({"plan":"y"})");
  t.end(exited(0));
  CHECK(only<effect::finish>(t.fx).outcome == end_kind::succeeded);
  CHECK(t.st.answer->answer == R"({"plan":"y"})");
}

TEST_CASE("answer: an attempt with no check of its own answer is not taken "
          "on an earlier attempt's",
          "[task_machine][answer]") {
  task t{checked()};
  t.start();
  t.answer(false, "", "no answer");
  t.end(exited(0));
  t.delay(5);
  REQUIRE(t.feed(input::timer{timer_kind::backoff, t.st.generation}));
  t.grant();
  // A stale check (attempt 1) is ignored; attempt 2 has none.
  CHECK_FALSE(t.feed(input::answer_checked{1, true, "{}", ""}));
  t.end(exited(0));
  auto& c = only<effect::classified>(t.fx).result;
  CHECK(c.cls == error_class::invalid_output);
  CHECK(c.rule == "answer");
}

TEST_CASE("answer: a failed attempt is judged by its exit, not its answer",
          "[task_machine][answer]") {
  task t{checked()};
  t.start();
  t.end(exited(3));
  // Classified by the rules, as any failure.
  CHECK(t.st.phase == task_phase::classifying);
  CHECK_FALSE(has<effect::classified>(t.fx));
}

TEST_CASE("answer: invalid_output takes its configured action",
          "[task_machine][answer]") {
  auto cfg = checked();
  cfg.actions[error_class::invalid_output] = action::fallback;
  task t{cfg, 2};
  t.start();
  t.answer(false, "", "no answer");
  t.end(exited(0));
  CHECK(has<effect::agent_switched>(t.fx));
}

TEST_CASE("answer: the gates run only after the answer passed",
          "[task_machine][answer]") {
  auto cfg = checked();
  cfg.steps.gates = true;
  task t{cfg};
  t.start();
  t.answer(true, "[]");
  t.end(exited(0));
  CHECK(t.st.phase == task_phase::gating);
  CHECK(only<effect::run_gates>(t.fx).attempt == 1);
}

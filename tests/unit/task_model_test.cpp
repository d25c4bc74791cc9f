// The task model (task_model.hpp) and the events (events.hpp) are the
// core's: a program that shows task statuses, results and events needs no
// CAF, and a result says why it ended as data.

#include "tasksup/supervisor/events.hpp"
#include "tasksup/supervisor/task_machine.hpp"
#include "tasksup/supervisor/task_model.hpp"

#if defined(CAF_VERSION)
#error "the task model must not include a CAF header"
#endif

#include <catch2/catch.hpp>

#include <string>

using namespace tasksup;

TEST_CASE("task model: names of the enums", "[task_model]") {
  CHECK(to_string(stop_mode::kill) == "kill");
  CHECK(parse_stop_mode("cancel") == stop_mode::cancel);
  CHECK_FALSE(parse_stop_mode("halt"));
  CHECK(to_string(task_state::quota_wait) == "quota_wait");
  CHECK(to_string(task_outcome::stopped) == "stopped");
  CHECK(to_string(event_kind::retry_scheduled) == "retry_scheduled");
  CHECK(to_string(end_reason::runtime_missing) == "runtime_missing");
  CHECK(to_string(static_cast<end_reason>(13)) == "unknown");
}

TEST_CASE("task model: a finished task's cause is the machine's end as data",
          "[task_model]") {
  effect::finish f;
  f.outcome = end_kind::succeeded;
  CHECK(cause_of(f).reason == end_reason::succeeded);
  f.outcome = end_kind::failed;
  decision d;
  d.cls = error_class::fatal;
  classification c;
  c.cls = error_class::fatal;
  c.rule = "fatal";
  d.classified = c;
  f.why = d;
  auto failed = cause_of(f);
  CHECK(failed.reason == end_reason::policy_failed);
  CHECK(failed.last_class == error_class::fatal);
  CHECK(failed.node.empty());
  // An attempt lost with its worker node is known by its lost node, not by
  // the words of its rule.
  c.cls = error_class::infrastructure;
  c.rule = "node_lost:w1";
  c.lost_node = "w1";
  f.why->classified = c;
  auto lost = cause_of(f);
  CHECK(lost.reason == end_reason::node_lost);
  CHECK(lost.node == "w1");
  CHECK(lost.last_class == error_class::infrastructure);
  c.lost_node.clear();
  f.why->classified = c;
  CHECK(cause_of(f).reason == end_reason::policy_failed);
  effect::finish stopped;
  stopped.outcome = end_kind::stopped;
  stopped.cause = end_cause::user_stop;
  CHECK(cause_of(stopped).reason == end_reason::user_stop);
  CHECK_FALSE(cause_of(stopped).last_class);
  stopped.cause = end_cause::deadline;
  CHECK(cause_of(stopped).reason == end_reason::deadline);
}

TEST_CASE("task model: a result's cause stays out of its JSON",
          "[task_model]") {
  task_result r;
  r.task_id = "t1";
  r.error = "deadline exceeded (5 s)";
  r.cause.reason = end_reason::deadline;
  auto json = result_to_json(r);
  CHECK(json.find("deadline exceeded (5 s)") != std::string::npos);
  CHECK(json.find("cause") == std::string::npos);
  event_head h;
  h.task_id = "t1";
  h.ts = 1.5;
  auto ev = task_done_event(h, r);
  REQUIRE(ev.fields());
  CHECK(ev.json().find("\"error\":\"deadline exceeded (5 s)\"") !=
        std::string::npos);
}

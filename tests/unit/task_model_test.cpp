// The task model (task_model.hpp) and the events (events.hpp) are the
// core's: a program that shows task statuses, results and events needs no
// CAF.

#include "tasksup/supervisor/events.hpp"
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
}

TEST_CASE("task model: a result renders as task_done carries it",
          "[task_model]") {
  task_result r;
  r.task_id = "t1";
  r.error = "deadline exceeded (5 s)";
  auto json = result_to_json(r);
  CHECK(json.find("deadline exceeded (5 s)") != std::string::npos);
  event_head h;
  h.task_id = "t1";
  h.ts = 1.5;
  auto ev = task_done_event(h, r);
  REQUIRE(ev.fields());
  CHECK(ev.json().find("\"error\":\"deadline exceeded (5 s)\"") !=
        std::string::npos);
}

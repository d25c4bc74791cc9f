// The container worker: output becomes bounded `log` events and a tail, the
// exit becomes one report, stop/kill reach the runtime.

#include "tasksup/actors/container_worker_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

using namespace tasksup;
using namespace tasksup::test;

TEST_CASE_METHOD(fixture, "a worker forwards bounded log events and reports",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  std::vector<std::string> lines;
  for (int i = 0; i < 10; ++i)
    lines.push_back("line " + std::to_string(i));
  runtime->script("a", {exits(3, lines)});
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.attempt = 1;
  w.spec.agent_id = "a";
  w.runtime = runtime;
  w.agent_cli = "a-cli";
  w.max_log_events = 4;
  spawn_container_worker(sys(), sup, w);
  run();
  CHECK(seen->of(event_kind::attempt_started).size() == 1);
  CHECK(seen->of(event_kind::log).size() == 4);
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.exit_code == 3);
  CHECK(seen->reports[0].outcome.tail == lines);
  CHECK(seen->reports[0].container_id.rfind("scripted-", 0) == 0);
}

TEST_CASE_METHOD(fixture, "a worker passes stop and kill to the runtime",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.agent_id = "a";
  w.runtime = runtime;
  auto worker = spawn_container_worker(sys(), sup, w);
  run();
  CHECK(seen->reports.empty());
  caf::anon_send(worker, stop_atom::value, stop_mode::cancel,
                 std::int64_t{2500});
  run();
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.exit_code == 143);
  CHECK(seen->reports[0].outcome.signal == 15);
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == runtime::scripted_call::kind::stop);
  CHECK(calls[1].grace == std::chrono::milliseconds{2500});
}

TEST_CASE_METHOD(fixture, "a worker that is killed takes its attempt with it",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.agent_id = "a";
  w.runtime = runtime;
  auto worker = spawn_container_worker(sys(), sup, w);
  run();
  REQUIRE(runtime->running() == 1);
  caf::anon_send_exit(worker, caf::exit_reason::kill);
  run();
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == runtime::scripted_call::kind::kill);
  CHECK(runtime->running() == 0);
  CHECK(seen->reports.empty()); // nobody reports for a killed worker
}

TEST_CASE_METHOD(fixture, "a worker that ends normally kills nothing",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {exits(0)});
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.agent_id = "a";
  w.runtime = runtime;
  spawn_container_worker(sys(), sup, w);
  run();
  REQUIRE(seen->reports.size() == 1);
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].what == runtime::scripted_call::kind::start);
}

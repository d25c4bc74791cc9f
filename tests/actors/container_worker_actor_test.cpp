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

namespace {

/// A handle that counts what the worker asks of it.
struct manual_handle : runtime::attempt_handle {
  int resumes = 0;
  void stop(std::chrono::milliseconds) override {}
  void kill() override {}
  void resume_output() override { ++resumes; }
  std::string id() const override { return "manual-1"; }
};

/// A runtime whose attempt the test drives by calling its callbacks, as the
/// runtime's reader thread would.
struct manual_runtime : runtime::container_runtime {
  runtime::attempt_callbacks cb;
  std::shared_ptr<manual_handle> handle = std::make_shared<manual_handle>();
  std::string_view name() const noexcept override { return "manual"; }
  std::shared_ptr<runtime::attempt_handle>
  start(runtime::attempt_spec, runtime::attempt_callbacks callbacks) override {
    cb = std::move(callbacks);
    return handle;
  }
};

} // namespace

TEST_CASE_METHOD(fixture,
                 "a worker that is behind pauses the runtime's reading and "
                 "resumes it once it caught up",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  auto manual = std::make_shared<manual_runtime>();
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.attempt = 1;
  w.runtime = manual;
  w.max_log_events = 1000000;
  spawn_container_worker(sys(), sup, w);
  run();
  REQUIRE(manual->cb.on_line);
  // The worker does not run meanwhile: every line waits in its mailbox.
  std::string line(1000, 'x');
  int sent = 0;
  while (manual->cb.on_line(runtime::output_stream::out, line) && sent < 10000)
    ++sent;
  ++sent; // the line that got "full" was sent too
  // 256 KiB in flight at most, counting 128 bytes per line on top.
  CHECK(sent == 256 * 1024 / 1128 + 1);
  CHECK(manual->handle->resumes == 0);
  run();
  CHECK(manual->handle->resumes == 1);
  CHECK(seen->of(event_kind::log).size() == static_cast<std::size_t>(sent));
  // Caught up: lines flow again without a pause.
  CHECK(manual->cb.on_line(runtime::output_stream::err, "oops"));
  manual->cb.on_notice("12 bytes of output in 1 lines were not shown");
  attempt_outcome out;
  out.exit_code = 2;
  manual->cb.on_exit(out);
  run();
  auto logs = seen->of(event_kind::log);
  REQUIRE(logs.size() == static_cast<std::size_t>(sent) + 2);
  CHECK(logs[0].json.find(R"("stream":"stdout")") != std::string::npos);
  CHECK(logs[logs.size() - 2].json.find(R"("stream":"stderr")") !=
        std::string::npos);
  CHECK(logs.back().json.find(R"("stream":"tasksup")") != std::string::npos);
  CHECK(logs.back().json.find("12 bytes of output") != std::string::npos);
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.exit_code == 2);
  CHECK(seen->reports[0].outcome.tail.back() == "oops");
}

// The container worker: output becomes bounded `log` events (the tail is the
// runtime's), the exit becomes one report, stop/kill reach the runtime.

#include "tasksup/actors/container_worker_actor.hpp"

#include "tasksup/actors/cluster.hpp"

#include "actor_fixture.hpp"

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/output_parser.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>

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
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
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
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
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
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
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
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  REQUIRE(seen->reports.size() == 1);
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].what == runtime::scripted_call::kind::start);
}

namespace {

/// Attempt 1 of task t1 by agent a on `rt`.
worker_options
first_attempt_options(std::shared_ptr<runtime::scripted_runtime> rt) {
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.attempt = 1;
  w.spec.agent_id = "a";
  w.runtime = std::move(rt);
  return w;
}

/// Attempt 1 of task t1 by agent a, its worker kept for the next attempt.
worker_options
kept_worker_options(std::shared_ptr<runtime::scripted_runtime> rt) {
  auto w = first_attempt_options(std::move(rt));
  w.keep = true;
  return w;
}

} // namespace

TEST_CASE_METHOD(fixture,
                 "a kept worker runs its supervisor's next attempt and "
                 "drops what the last one's runtime still sends",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {exits(3, {"first"}), hangs()});
  auto w = kept_worker_options(runtime);
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].attempt == 1);
  CHECK(seen->reports[0].outcome.tail == std::vector<std::string>{"first"});
  // Only its supervisor starts the next attempt.
  auto next = w;
  next.spec.attempt = 2;
  caf::anon_send(worker, next_attempt_atom::value, attempt_options{next});
  run();
  CHECK(runtime->calls().size() == 1);
  // Attempt 1's runtime is late: neither between the attempts nor during
  // attempt 2 does its line count.
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                 false, std::string{"late"});
  run();
  caf::send_as(sup, worker, next_attempt_atom::value, attempt_options{next});
  run();
  REQUIRE(runtime->calls().size() == 2);
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                 false, std::string{"late"});
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 2,
                 false, std::string{"mine"});
  run();
  caf::anon_send(worker, stop_atom::value, stop_mode::kill, std::int64_t{0});
  run();
  REQUIRE(seen->reports.size() == 2);
  CHECK(seen->reports[1].attempt == 2);
  auto logs = seen->of(event_kind::log);
  auto shown = [&](const char* text) {
    return std::count_if(logs.begin(), logs.end(), [&](const auto& e) {
      return e.json().find(text) != std::string::npos;
    });
  };
  CHECK(shown("mine") == 1);
  CHECK(shown("late") == 0);
  REQUIRE(runtime->calls().size() == 3); // start, start, kill
  // Its supervisor going down ends it, touching no finished attempt.
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  run();
  CHECK(runtime->calls().size() == 3);
}

TEST_CASE_METHOD(fixture,
                 "a kept worker ends when its supervisor lets it go, and "
                 "only then",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {exits(1, {"first"}), exits(1, {"second"})});
  auto w = kept_worker_options(runtime);
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  REQUIRE(seen->reports.size() == 1);
  auto next = w;
  next.spec.attempt = 2;
  // Anyone else's release is ignored: it still runs the next attempt.
  caf::anon_send(worker, release_atom::value);
  run();
  caf::send_as(sup, worker, next_attempt_atom::value, attempt_options{next});
  run();
  REQUIRE(seen->reports.size() == 2);
  CHECK(runtime->calls().size() == 2);
  // Its supervisor's ends it: the next attempt finds nobody.
  auto before = sys().registry().running();
  caf::send_as(sup, worker, release_atom::value);
  run();
  CHECK(sys().registry().running() == before - 1);
  next.spec.attempt = 3;
  caf::send_as(sup, worker, next_attempt_atom::value, attempt_options{next});
  run();
  CHECK(runtime->calls().size() == 2);
}

namespace {

worker_options
silent_agent_options(std::shared_ptr<runtime::scripted_runtime> rt,
                     double idle_timeout_s) {
  auto w = first_attempt_options(std::move(rt));
  w.idle_timeout_s = idle_timeout_s;
  w.idle_stop_grace_ms = 1000;
  return w;
}

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
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
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
  out.tail = {"the runtime's tail"};
  manual->cb.on_exit(out);
  run();
  auto logs = seen->of(event_kind::log);
  REQUIRE(logs.size() == static_cast<std::size_t>(sent) + 2);
  CHECK(logs[0].json().find(R"("stream":"stdout")") != std::string::npos);
  CHECK(logs[logs.size() - 2].json().find(R"("stream":"stderr")") !=
        std::string::npos);
  CHECK(logs.back().json().find(R"("stream":"tasksup")") != std::string::npos);
  CHECK(logs.back().json().find("12 bytes of output") != std::string::npos);
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.exit_code == 2);
  // The tail is the runtime's: the worker keeps none of its own.
  CHECK(seen->reports[0].outcome.tail ==
        std::vector<std::string>{"the runtime's tail"});
}

TEST_CASE_METHOD(fixture, "a silent attempt is stopped after idle_timeout_s",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup),
                         silent_agent_options(runtime, 30));
  run();
  advance(29.9);
  run();
  CHECK(seen->reports.empty());
  CHECK(runtime->calls().size() == 1); // only the start
  advance(0.2);
  run();
  REQUIRE(seen->reports.size() == 1);
  const auto& out = seen->reports[0].outcome;
  CHECK(out.signal == 15);
  REQUIRE(out.structured);
  REQUIRE(out.structured->error);
  CHECK(out.structured->error->type == idle_timeout_type);
  auto calls = runtime->calls();
  REQUIRE(calls.size() == 2);
  CHECK(calls[1].what == runtime::scripted_call::kind::stop);
  CHECK(calls[1].grace == std::chrono::milliseconds{1000});
  // The user sees why.
  auto logs = seen->of(event_kind::log);
  REQUIRE_FALSE(logs.empty());
  CHECK_THAT(logs.back().json(), Catch::Contains("no output for"));
  // Classified retryable with its own rule, even if the stop ends in a kill.
  auto rules = classifier::make(default_classifier_rules());
  REQUIRE(rules);
  auto killed = out;
  killed.exit_code = 137;
  killed.signal = 9;
  auto c = classify_attempt(*rules, killed, "a-cli", {});
  CHECK(c.cls == error_class::retryable);
  CHECK(c.rule == "idle_timeout");
}

TEST_CASE_METHOD(fixture, "output keeps an attempt from going idle",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup),
                           silent_agent_options(runtime, 10));
  run();
  // A line every 6 s for a minute: never 10 s of silence.
  for (int i = 0; i < 10; ++i) {
    advance(6);
    caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                   false, std::string{"working"});
    run();
  }
  CHECK(seen->reports.empty());
  CHECK(runtime->calls().size() == 1);
  // Then silence: stopped 10 s after the last line, not before.
  advance(9.5);
  run();
  CHECK(seen->reports.empty());
  advance(1);
  run();
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.structured->error->type == idle_timeout_type);
}

TEST_CASE_METHOD(fixture,
                 "idle_noise lines do not keep an attempt from going idle",
                 "[container_worker]") {
  // codex offline: a "Reconnecting..." line every 7 s, forever.
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  auto w = silent_agent_options(runtime, 30);
  agent_spec a;
  a.idle_timeout_s = 30;
  a.idle_noise = find_agent_profile("codex")->idle_noise;
  apply_agent_options(w, a);
  REQUIRE_FALSE(w.idle_noise.empty());
  w.output = output_format::codex_jsonl;
  // The same on a worker node: the attempt carries its noise patterns.
  CHECK(from_remote(to_remote(w, "process"), runtime).idle_noise ==
        w.idle_noise);
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  // Real output first, at 5 s: the idle clock starts there.
  advance(5);
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                 false, std::string{R"({"type":"turn.started"})"});
  run();
  const std::string reconnect =
    R"j({"type":"error","message":"Reconnecting... waiting for network )j"
    R"j((Connection failed: error sending request)"})j";
  for (int i = 0; i < 4; ++i) {
    advance(7);
    caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                   false, reconnect);
    run();
  }
  // 28 s of noise after the last real line: still running.
  CHECK(seen->reports.empty());
  advance(1.9);
  run();
  CHECK(seen->reports.empty());
  // 30 s after the last real line it is stopped, although a noise line came
  // 2 s ago.
  advance(0.2);
  run();
  REQUIRE(seen->reports.size() == 1);
  const auto& out = seen->reports[0].outcome;
  REQUIRE(out.structured);
  REQUIRE(out.structured->error);
  CHECK(out.structured->error->type == idle_noise_type);
  CHECK(out.structured->error->message == reconnect);
  // The noise lines were still shown (the runtime's tail keeps them for the
  // rules).
  auto logs = seen->of(event_kind::log);
  CHECK(std::count_if(logs.begin(), logs.end(), [](const auto& e) {
          return e.json().find("Reconnecting") != std::string::npos;
        }) >= 4);
  REQUIRE_FALSE(logs.empty());
  CHECK_THAT(logs.back().json(), Catch::Contains("only idle noise"));
  // Retryable, with its own rule and the line a person recognises; a kill
  // after the grace period is not a crash.
  auto rules = classifier::make(default_classifier_rules());
  REQUIRE(rules);
  auto killed = out;
  killed.exit_code = 137;
  killed.signal = 9;
  auto c = classify_attempt(*rules, killed, "codex", {});
  CHECK(c.cls == error_class::retryable);
  CHECK(c.rule == "idle_noise");
  CHECK_THAT(c.line, Catch::Contains("Reconnecting... waiting for network"));
}

TEST_CASE_METHOD(fixture,
                 "without idle_noise every line is activity, and an idle "
                 "stop after real output is idle_timeout",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  auto w = silent_agent_options(runtime, 10);
  w.idle_noise = {"^Reconnecting"};
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  // Noise, then a real line: the stop that follows is a plain idle timeout.
  advance(4);
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                 true, std::string{"Reconnecting... 1/5"});
  run();
  advance(4);
  caf::anon_send(caf::actor_cast<caf::actor>(worker), output_atom::value, 1,
                 false, std::string{"Working"});
  run();
  advance(9.9);
  run();
  CHECK(seen->reports.empty());
  advance(0.2);
  run();
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].outcome.structured->error->type == idle_timeout_type);
  // A pattern anchored at the start does not match the line elsewhere.
  CHECK_FALSE(idle_noise_filter{{"^Reconnecting"}}.is_noise("x Reconnecting"));
  CHECK(idle_noise_filter{{"^Reconnecting"}}.is_noise("RECONNECTING now"));
  CHECK_FALSE(idle_noise_filter{}.is_noise("Reconnecting"));
}

TEST_CASE_METHOD(fixture, "without idle_timeout_s a silent attempt runs on",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {hangs()});
  auto worker =
    spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup),
                           silent_agent_options(runtime, 0));
  run();
  advance(86400);
  run();
  CHECK(seen->reports.empty());
  caf::anon_send(worker, stop_atom::value, stop_mode::kill, std::int64_t{0});
  run();
  REQUIRE(seen->reports.size() == 1);
  CHECK_FALSE(seen->reports[0].outcome.structured);
}

TEST_CASE_METHOD(fixture,
                 "structured output: readable log events, the result in the "
                 "outcome",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  std::vector<std::string> lines{
    R"j({"type":"system","subtype":"init","cwd":"/w","tools":["Bash"]})j",
    R"j({"type":"assistant","message":{"content":[{"type":"text","text":"API Error: Request rejected (429)"}]},"error":"rate_limit","api_error_status":429})j",
    R"j({"type":"result","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","result":"API Error: Request rejected (429)","total_cost_usd":0.5,"usage":{"input_tokens":3,"output_tokens":4}})j",
  };
  runtime->script("a", {exits(1, lines)});
  auto w = silent_agent_options(runtime, 0);
  w.output = output_format::claude_stream_json;
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  auto logs = seen->of(event_kind::log);
  REQUIRE(logs.size() == 2); // the init event is machinery
  CHECK_THAT(logs[0].json(), Catch::Contains("error: API Error"));
  CHECK_THAT(logs[1].json(), Catch::Contains("failed: API Error"));
  REQUIRE(seen->reports.size() == 1);
  const auto& out = seen->reports[0].outcome;
  CHECK(out.tail == lines); // the text rules still see the raw lines
  REQUIRE(out.structured);
  REQUIRE(out.structured->error);
  CHECK(out.structured->error->type == "rate_limit_error");
  CHECK(out.structured->error->http_status == 429);
  REQUIRE(out.structured->cost_usd);
  CHECK(*out.structured->cost_usd == 0.5);
  REQUIRE(out.structured->usage);
  CHECK(out.structured->usage->output_tokens == 4);
}

TEST_CASE_METHOD(fixture, "env_passthrough copies only the listed variables",
                 "[container_worker]") {
  ::setenv("TASKSUP_TEST_PASSED", "secret-1", 1);
  ::setenv("TASKSUP_TEST_OVERRIDDEN", "from-node", 1);
  ::setenv("TASKSUP_TEST_NOT_LISTED", "nope", 1);
  ::unsetenv("TASKSUP_TEST_MISSING");
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {exits(0)});
  auto w = silent_agent_options(runtime, 0);
  w.spec.env["TASKSUP_TEST_OVERRIDDEN"] = "from-task";
  agent_spec a;
  a.env_passthrough = {"TASKSUP_TEST_PASSED", "TASKSUP_TEST_OVERRIDDEN",
                       "TASKSUP_TEST_MISSING"};
  a.output = output_format::codex_jsonl;
  a.idle_timeout_s = 12;
  apply_agent_options(w, a);
  CHECK(w.output == output_format::codex_jsonl);
  CHECK(w.idle_timeout_s == 12);
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  auto calls = runtime->calls();
  REQUIRE_FALSE(calls.empty());
  const auto& env = calls[0].spec.env;
  CHECK(env.at("TASKSUP_TEST_PASSED") == "secret-1");
  CHECK(env.at("TASKSUP_TEST_OVERRIDDEN") == "from-task");
  CHECK(env.count("TASKSUP_TEST_MISSING") == 0);
  CHECK(env.count("TASKSUP_TEST_NOT_LISTED") == 0);
  ::unsetenv("TASKSUP_TEST_PASSED");
  ::unsetenv("TASKSUP_TEST_OVERRIDDEN");
  ::unsetenv("TASKSUP_TEST_NOT_LISTED");
}

namespace {

/// A runtime whose ids come after `start` returned, as the process
/// runtime's do: `on_started` first, then the scripted attempt. Its handles
/// do not know the id (the process runtime's wait for it).
class late_id_runtime : public runtime::container_runtime {
public:
  late_id_runtime(std::shared_ptr<runtime::scripted_runtime> inner,
                  std::string id)
    : inner_(std::move(inner)), id_(std::move(id)) {}

  std::string_view name() const noexcept override { return "late-id"; }

  std::shared_ptr<runtime::attempt_handle>
  start(runtime::attempt_spec spec, runtime::attempt_callbacks cb) override {
    auto started = std::exchange(cb.on_started, nullptr);
    REQUIRE(started);
    started(id_);
    return std::make_shared<late_handle>(
      inner_->start(std::move(spec), std::move(cb)));
  }

private:
  class late_handle : public runtime::attempt_handle {
  public:
    explicit late_handle(std::shared_ptr<runtime::attempt_handle> inner)
      : inner_(std::move(inner)) {}
    void stop(std::chrono::milliseconds grace) override { inner_->stop(grace); }
    void kill() override { inner_->kill(); }
    std::string id() const override { return {}; }
    bool id_later() const override { return true; }

  private:
    std::shared_ptr<runtime::attempt_handle> inner_;
  };

  std::shared_ptr<runtime::scripted_runtime> inner_;
  std::string id_;
};

} // namespace

TEST_CASE_METHOD(fixture,
                 "a worker whose runtime tells the id after start announces "
                 "the attempt with it, before its output and exit",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  runtime->script("a", {exits(1, {"one line"})});
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.attempt = 1;
  w.spec.agent_id = "a";
  w.agent_cli = "a-cli";
  w.runtime = std::make_shared<late_id_runtime>(runtime, "4242");
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  auto kinds = seen->kinds();
  REQUIRE(kinds.size() == 2);
  CHECK(kinds[0] == event_kind::attempt_started);
  CHECK(kinds[1] == event_kind::log);
  auto started = seen->of(event_kind::attempt_started);
  REQUIRE(started.size() == 1);
  REQUIRE(started[0].fields() != nullptr);
  auto& data = std::get<event_data::attempt_started>(started[0].fields()->data);
  CHECK(data.container_id == "4242");
  CHECK(data.agent_id == "a");
  CHECK(data.agent_cli == "a-cli");
  REQUIRE(seen->reports.size() == 1);
  CHECK(seen->reports[0].container_id == "4242");
  CHECK(seen->reports[0].outcome.exit_code == 1);
}

TEST_CASE_METHOD(fixture,
                 "an attempt the node could not take over after a restart is "
                 "lost with the node, not failed by its agent",
                 "[container_worker]") {
  auto seen = std::make_shared<collected>();
  auto sup = collector(seen);
  worker_options w;
  w.spec.task_id = "t1";
  w.spec.attempt = 2;
  w.spec.agent_id = "a";
  w.runtime = runtime;
  // The scripted runtime's attempts die with it: every adoption fails.
  w.adopt_id = std::string{"scripted-1"};
  spawn_container_worker(sys(), caf::actor_cast<attempt_owner_actor>(sup), w);
  run();
  REQUIRE(seen->reports.size() == 1);
  auto& out = seen->reports[0].outcome;
  CHECK_THAT(out.infrastructure_error,
             Catch::StartsWith("node restarted and the attempt could not be "
                               "adopted"));
  CHECK(out.lost_node == "this node");
  // So it classifies as a node loss: retried at once, and not counted
  // against the agent's breaker (task_machine's `is_node_loss`).
  auto c = classifier::make(default_classifier_rules());
  REQUIRE(c);
  auto cls = c->classify(out, "a-cli", std::chrono::system_clock::now());
  CHECK(cls.cls == error_class::infrastructure);
  CHECK(cls.rule == "node_lost:this node");
  CHECK(is_node_loss(cls));
}

#include "progress_view.hpp"

#include "tasksup/actors/events.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using tasksup::app::human_duration;
using tasksup::app::progress_view;

namespace {

std::vector<std::string> render(progress_view& view, const char* json) {
  return view.render(boost::json::parse(json).as_object());
}

} // namespace

TEST_CASE("an attempt, its classification and a retry read as a story") {
  progress_view view;
  auto started = render(view, R"({"event":"attempt_started","task_id":"t",
    "attempt":1,"agent_id":"primary","agent_cli":"codex","container_id":"pid 42"})");
  REQUIRE(started == std::vector<std::string>{
                       "attempt 1: primary (codex) started, pid 42"});
  auto exited = render(view, R"({"event":"attempt_exited","task_id":"t",
    "attempt":1,"exit_code":1,"signal":0,"oom_killed":false,"duration_s":2.5})");
  REQUIRE(exited ==
          std::vector<std::string>{"attempt 1 exited with code 1 after 2.5s"});
  auto classified = render(view, R"({"event":"classified","task_id":"t",
    "attempt":1,"class":"rate_limit","rule":"rate_limit",
    "line":"HTTP 429 Too Many Requests","retry_after_s":30})");
  REQUIRE(classified == std::vector<std::string>{
                          "classified as rate_limit by rule rate_limit: "
                          "\"HTTP 429 Too Many Requests\" (retry after 30s)"});
  auto retry = render(view, R"({"event":"retry_scheduled","task_id":"t",
    "attempt":1,"retry_count":1,"max_retries":3,"agent":"primary",
    "delay_s":15})");
  REQUIRE(retry == std::vector<std::string>{"retrying (1/3) primary in 15s"});
  REQUIRE(view.pending().has_value());
  CHECK(view.pending()->delay_s == 15);
  CHECK(view.pending()->text == "retrying (1/3)");
  render(view, R"({"event":"attempt_started","task_id":"t","attempt":2,
    "agent_id":"primary","agent_cli":"codex"})");
  CHECK_FALSE(view.pending().has_value());
}

TEST_CASE("a process attempt is named by its pid, a container by its id") {
  progress_view view;
  CHECK(render(view, R"({"event":"attempt_started","attempt":1,
    "agent_id":"a","agent_cli":"x","container_id":"4242"})") ==
        std::vector<std::string>{"attempt 1: a (x) started, pid 4242"});
  CHECK(render(view, R"({"event":"attempt_started","attempt":1,
    "agent_id":"a","agent_cli":"x","container_id":"tasksup-t-1-ab12"})") ==
        std::vector<std::string>{"attempt 1: a (x) started, tasksup-t-1-ab12"});
}

TEST_CASE("the final summary names outcome, agent, counts and artifacts") {
  progress_view view;
  auto lines = render(view, R"({"event":"task_done","task_id":"t",
    "outcome":"succeeded","exit_code":0,"error":null,
    "artifacts":["/tmp/a/result.patch"],"duration_s":75,
    "log_dir":"/tmp/a",
    "metadata":{"agent_used":"claude","agent_id":"backup","retry_count":2,
                "total_attempts":4,"fallback_count":1}})");
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "task succeeded (exit code 0)");
  CHECK(lines[1] == "  agent used: claude (backup), attempts: 4, retries: 2, "
                    "fallbacks: 1");
  CHECK(lines[2] == "  duration: 1m15s");
  CHECK(lines[3] == "  artifacts:");
  CHECK(lines[4] == "    /tmp/a/result.patch");
  CHECK(lines[5] == "  logs: /tmp/a");
}

TEST_CASE("agent output cannot inject terminal escape sequences") {
  progress_view view;
  auto lines = render(view, R"({"event":"log","task_id":"t","attempt":1,
    "line":"\u001b[2Jgotcha\r"})");
  REQUIRE(lines == std::vector<std::string>{"  | ?[2Jgotcha?"});
}

TEST_CASE("output lines are hidden when asked and tasks prefixed in streams") {
  progress_view view{{false, true, false}};
  CHECK(render(view, R"({"event":"log","task_id":"t","line":"x"})").empty());
  auto lines = render(view, R"({"event":"agent_switched","task_id":"t",
    "attempt":3,"from":"a","to":"b"})");
  REQUIRE(lines == std::vector<std::string>{"[t] switching agent: a -> b"});
}

TEST_CASE("events with missing or mistyped keys still render") {
  progress_view view;
  auto lines = render(view, R"({"event":"attempt_exited","exit_code":"x"})");
  REQUIRE(lines == std::vector<std::string>{"attempt ? exited with code ?"});
  CHECK(render(view, R"({"event":"no_such_event"})").empty());
}

TEST_CASE("durations read like a person would write them") {
  CHECK(human_duration(0.45) == "450ms");
  CHECK(human_duration(1.5) == "1.5s");
  CHECK(human_duration(15) == "15s");
  CHECK(human_duration(90) == "1m30s");
  CHECK(human_duration(120) == "2m");
  CHECK(human_duration(7500) == "2h05m");
  CHECK(human_duration(-3) == "0s");
}

TEST_CASE("a user stop is said once, with a different message kept") {
  progress_view view;
  auto cancel = render(view, R"({"event":"user_stop","task_id":"t",
    "attempt":1,"mode":"cancel","message":"user_cancel requested"})");
  REQUIRE(cancel == std::vector<std::string>{"user_cancel requested"});
  auto skipped = render(view, R"({"event":"user_stop","task_id":"t",
    "attempt":1,"mode":"cancel","message":"retry skipped due to user stop"})");
  REQUIRE(skipped ==
          std::vector<std::string>{"user_cancel requested",
                                   "retry skipped due to user stop"});
}

TEST_CASE("the summary counts the task's retries, per agent when several "
          "retried") {
  progress_view view;
  auto lines = render(view, R"({"event":"task_done","task_id":"t",
    "outcome":"succeeded","exit_code":0,"error":null,"artifacts":[],
    "metadata":{"agent_used":"b-cli","agent_id":"b","retry_count":1,
    "total_attempts":5,"fallback_count":1,"total_retries":3,
    "retries_by_agent":{"a":2,"b":1}}})");
  REQUIRE(lines.size() == 2);
  CHECK(lines[1] == "  agent used: b-cli (b), attempts: 5, retries: 3 (a: 2, "
                    "b: 1), fallbacks: 1");
}

TEST_CASE("an attempt that never started says so, with no exit code") {
  progress_view view;
  CHECK(render(view, R"({"event":"attempt_exited","task_id":"t","attempt":1,
    "exit_code":0,"signal":0,"oom_killed":false,"duration_s":0,
    "infrastructure_error":"image x not found locally","started":false})") ==
        std::vector<std::string>{
          "attempt 1 could not start: image x not found locally"});
  auto done = render(view, R"({"event":"task_done","task_id":"t",
    "outcome":"failed","exit_code":-1,"error":"no agent left","artifacts":[],
    "metadata":{"agent_used":"a","agent_id":"a","retry_count":0,
    "total_attempts":1,"fallback_count":0}})");
  REQUIRE_FALSE(done.empty());
  CHECK(done[0] == "task failed: no agent left");
}

TEST_CASE("with show_time every line starts with the event's ISO 8601 time") {
  progress_view::options opts;
  opts.show_time = true;
  opts.prefix_task = true;
  progress_view view{opts};
  auto lines = view.render(
    boost::json::parse(R"({"event":"attempt_exited","task_id":"t","attempt":1,)"
                       R"("ts":1795362464.5893607,"exit_code":3})")
      .as_object());
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("2026-11-22T15:47:44Z [t] attempt 1 exited with code 3",
                       0) == 0);
  // No time, no prefix.
  auto bare = view.render(
    boost::json::parse(R"({"event":"warning","task_id":"t","message":"m"})")
      .as_object());
  REQUIRE(bare.size() == 1);
  CHECK(bare[0].rfind("[t] ", 0) == 0);
}

TEST_CASE("progress view: a step event says which step, and how it went",
          "[progress_view]") {
  progress_view view;
  auto lines = render(view, R"({"event": "step", "task_id": "t",
    "attempt": 1, "step": "gate", "name": "tests", "passed": false,
    "exit_code": 1, "message": "failed: 2 tests failed"})");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("gate tests") != std::string::npos);
  CHECK(lines[0].find("failed: 2 tests failed") != std::string::npos);
}

TEST_CASE("an attempt's line shows its tokens and cost when known") {
  progress_view view;
  auto both = render(view, R"({"event":"attempt_exited","task_id":"t",
    "attempt":2,"exit_code":0,"signal":0,"oom_killed":false,"duration_s":4,
    "usage":{"input_tokens":1200,"output_tokens":345,"cached_input_tokens":0},
    "cost_usd":0.0123})");
  CHECK(both == std::vector<std::string>{
                  "attempt 2 exited with code 0 after 4s (1200 tokens in, 345 "
                  "out, $0.0123)"});
  auto tokens = render(view, R"({"event":"attempt_exited","task_id":"t",
    "attempt":3,"exit_code":1,"duration_s":1,
    "usage":{"input_tokens":10,"output_tokens":2,"cached_input_tokens":0}})");
  CHECK(tokens == std::vector<std::string>{
                    "attempt 3 exited with code 1 after 1s (10 tokens in, 2 "
                    "out)"});
  // Nonsense from another node is not printed.
  auto bad = render(view, R"({"event":"attempt_exited","task_id":"t",
    "attempt":4,"exit_code":1,"duration_s":1,
    "usage":{"input_tokens":-5,"output_tokens":"x"},"cost_usd":1e300})");
  CHECK(bad ==
        std::vector<std::string>{"attempt 4 exited with code 1 after 1s"});
}

// -- the typed form: events built in this process render from their typed
//    keys, with the same text and state as from their JSON.

namespace {

using tasksup::event;

tasksup::event_head head(int attempt) {
  // Built in this process: typed keys, JSON rendered on demand.
  return {"t-1", attempt, "0123456789abcdef0123456789abcdef",
          "0123456789abcdef", 1795362464.5893607};
}

/// One event of every kind, with the values the view treats specially.
std::vector<event> every_kind() {
  using namespace tasksup;
  std::vector<event> out;
  out.push_back(task_submitted_event(head(0), "default", {"a", "b"}));
  out.push_back(attempt_started_event(head(1), "a", "codex", "4242"));
  out.push_back(log_event(head(1), "\x1b[2Jgotcha\r and \xff bytes"));
  out.push_back(log_event(head(1), "quoted \"text\"\tand\\", "stderr"));
  attempt_outcome exited;
  exited.exit_code = 137;
  exited.signal = 9;
  exited.oom_killed = true;
  exited.duration_s = 2.5;
  out.push_back(attempt_exited_event(head(1), exited));
  classification c;
  c.cls = error_class::rate_limit;
  c.rule = "rate_limit";
  c.line = "HTTP 429 " + std::string(250, 'x');
  c.retry_after_s = 30;
  out.push_back(classified_event(head(1), c));
  delay_decision delay;
  delay.delay_s = 15;
  out.push_back(retry_scheduled_event(head(1), 1, 3, "a", delay, "rate"));
  out.push_back(attempt_started_event(head(2), "a", "codex", "tasksup-c1"));
  attempt_outcome used;
  used.exit_code = 1;
  used.duration_s = std::nan("");
  used.structured = structured_result{};
  used.structured->usage = token_usage{1200, 345, 0};
  used.structured->cost_usd = 0.0123;
  out.push_back(attempt_exited_event(head(2), used));
  classification plain;
  out.push_back(classified_event(head(2), plain));
  delay.delay_s = std::nan("");
  out.push_back(retry_scheduled_event(head(2), 2, 3, "a", delay, ""));
  out.push_back(agent_switched_event(head(2), "a", "b", "retries exhausted"));
  out.push_back(agent_switched_event(
    head(2), "a", "b", "fallback forced by user; switching to agent 2 of 2",
    "user"));
  delay.delay_s = 5;
  out.push_back(retry_scheduled_event(head(2), 0, 3, "a", delay, "restart", 3));
  attempt_outcome lost;
  lost.exit_code = -1;
  lost.infrastructure_error = "the container worker on node n ended without "
                              "reporting its attempt";
  out.push_back(attempt_exited_event(head(2), lost));
  out.push_back(step_event(head(2), "user_retry", "", true, std::nullopt,
                           "immediate retry requested by user (12 s of "
                           "backoff skipped)"));
  attempt_outcome never;
  never.started = false;
  never.infrastructure_error = "image x not found locally";
  out.push_back(attempt_exited_event(head(3), never));
  never.infrastructure_error.clear();
  out.push_back(attempt_exited_event(head(4), never));
  out.push_back(
    user_stop_event(head(4), stop_mode::cancel, "user_cancel requested"));
  out.push_back(user_stop_event(head(4), stop_mode::kill,
                                "retry skipped due to user stop"));
  out.push_back(warning_event(head(4), "agent b: no such CLI"));
  out.push_back(step_event(head(4), "gate", "tests", false, 1, "2 failed"));
  out.push_back(step_event(head(4), "deliver", "", true, std::nullopt, "ok"));
  out.push_back(escalated_event(head(4), task_outcome::failed, "parent"));
  task_result failed;
  failed.task_id = "t-1";
  failed.error = "no agent left";
  failed.metadata.agent_used = "b-cli";
  failed.metadata.agent_id = "b";
  failed.metadata.total_attempts = 4;
  failed.metadata.total_retries = 3;
  failed.metadata.retries_by_agent = {{"a", 2}, {"b", 1}};
  failed.metadata.fallback_count = 1;
  out.push_back(task_done_event(head(4), failed));
  task_result ok;
  ok.task_id = "t-1";
  ok.outcome = task_outcome::succeeded;
  ok.exit_code = 0;
  ok.artifacts = {"/tmp/a/result.patch", "/tmp/a/\x01odd"};
  ok.metadata.agent_used = "codex";
  ok.metadata.agent_id = "a";
  ok.metadata.total_attempts = 1;
  ok.metadata.retries_by_agent = {{"a", 0}};
  out.push_back(task_done_event(head(1), ok));
  return out;
}

} // namespace

TEST_CASE("an event of this process renders the same from its typed keys as "
          "from its JSON") {
  progress_view::options plain;
  progress_view::options everything;
  everything.show_output = false;
  everything.prefix_task = true;
  everything.color = true;
  everything.show_time = true;
  for (auto opts : {plain, everything}) {
    progress_view typed{opts};
    progress_view from_json{opts};
    progress_view::extra more{75.0, "/tmp/a"};
    for (auto& ev : every_kind()) {
      REQUIRE(ev.fields() != nullptr);
      auto obj = boost::json::parse(ev.json()).as_object();
      if (ev.kind == tasksup::event_kind::task_done) {
        obj["duration_s"] = *more.duration_s;
        obj["log_dir"] = more.log_dir;
      }
      INFO(ev.json());
      CHECK(typed.render(ev, more) == from_json.render(obj));
      CHECK(typed.running() == from_json.running());
      REQUIRE(typed.pending().has_value() == from_json.pending().has_value());
      if (typed.pending()) {
        CHECK(typed.pending()->task_id == from_json.pending()->task_id);
        CHECK(typed.pending()->text == from_json.pending()->text);
        CHECK(typed.pending()->delay_s == from_json.pending()->delay_s);
      }
    }
  }
}

TEST_CASE("an event of this process renders without its JSON, one read back "
          "from JSON renders from it") {
  progress_view view;
  auto ev = tasksup::attempt_started_event(head(2), "a", "codex", "17");
  REQUIRE(ev.fields() != nullptr);
  CHECK(view.render(ev) ==
        std::vector<std::string>{"attempt 2: a (codex) started, pid 17"});
  // As the journal or another node hands it over: the JSON alone.
  event read_back;
  read_back.kind = tasksup::event_kind::attempt_started;
  read_back.body = tasksup::json_event_body("", "", ev.json());
  CHECK(view.render(read_back) ==
        std::vector<std::string>{"attempt 2: a (codex) started, pid 17"});
}

TEST_CASE("submission, warnings, escalation and a classification without a "
          "line read as before") {
  progress_view view;
  CHECK(view.render(tasksup::task_submitted_event(head(0), "default", {"a"})) ==
        std::vector<std::string>{"task t-1 submitted"});
  CHECK(view.render(tasksup::warning_event(head(1), "agent b: no CLI\x1b")) ==
        std::vector<std::string>{"warning: agent b: no CLI?"});
  CHECK(view
          .render(tasksup::escalated_event(
            head(1), tasksup::task_outcome::failed, "parent"))
          .empty());
  tasksup::classification c;
  c.cls = tasksup::error_class::fatal;
  c.rule = "auth";
  CHECK(view.render(tasksup::classified_event(head(1), c)) ==
        std::vector<std::string>{"classified as fatal by rule auth"});
  CHECK(view.render(tasksup::agent_switched_event(head(1), "a", "b", "why")) ==
        std::vector<std::string>{"switching agent: a -> b (why)"});
}

TEST_CASE("a switch says why, a permanent task's restart is not a retry, a "
          "lost attempt says it was lost") {
  using namespace tasksup;
  progress_view view;
  CHECK(view.render(agent_switched_event(
          head(1), "a", "b",
          "circuit breaker open for a; switching to agent 2 of 2",
          "breaker_open")) ==
        std::vector<std::string>{
          "switching agent: a -> b (circuit breaker open for a)"});
  CHECK(
    view.render(agent_switched_event(
      head(1), "a", "b", "retry budget exhausted; switching to agent 2 of 2",
      "retry_budget")) ==
    std::vector<std::string>{
      "switching agent: a -> b (retry budget exhausted)"});
  delay_decision delay;
  delay.delay_s = 5;
  CHECK(view.render(retry_scheduled_event(
          head(1), 0, 3, "a", delay,
          "permanent task exited 0: restarting (restart 2, ran 2m stably)", 2,
          120, true)) ==
        std::vector<std::string>{"restarting (restart 2, ran 2m stably) a in "
                                 "5s"});
  REQUIRE(view.pending().has_value());
  CHECK(view.pending()->text == "restarting (restart 2, ran 2m stably)");
  attempt_outcome lost;
  lost.exit_code = -1;
  lost.infrastructure_error = "worker node n1 lost: connection closed";
  CHECK(view.render(attempt_exited_event(head(2), lost)) ==
        std::vector<std::string>{
          "attempt 2 was lost: worker node n1 lost: connection closed"});
}

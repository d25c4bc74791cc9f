// Event rendering: SPEC §9's keys for every kind, and untrusted output kept
// valid JSON.

#include "tasksup/actors/events.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <set>
#include <string>

using namespace tasksup;

namespace {

event_head head() {
  event_head h;
  h.task_id = "t1";
  h.attempt = 2;
  h.trace_id = std::string(32, 'a');
  h.span_id = std::string(16, 'b');
  h.ts = 1700000000.5;
  return h;
}

std::set<std::string> keys_of(const event& ev) {
  std::set<std::string> out;
  auto doc = boost::json::parse(ev.json);
  for (auto& kv : doc.as_object())
    out.insert(std::string{kv.key()});
  return out;
}

std::set<std::string> with_common(std::set<std::string> xs) {
  xs.insert({"event", "task_id", "attempt", "trace_id", "span_id", "ts"});
  return xs;
}

} // namespace

TEST_CASE("every event kind carries SPEC §9's keys", "[events]") {
  attempt_outcome out;
  out.exit_code = 137;
  out.signal = 9;
  classification c;
  c.cls = error_class::rate_limit;
  c.rule = "rate_limit";
  c.line = "429";
  c.retry_after_s = 30;
  task_result r;
  r.task_id = "t1";
  r.outcome = task_outcome::failed;
  r.exit_code = 2;
  r.error = "retries exhausted";
  r.artifacts = {"/tmp/x"};
  CHECK(keys_of(attempt_started_event(head(), "a", "codex", "c1")) ==
        with_common({"agent_id", "agent_cli", "container_id"}));
  auto exited = keys_of(attempt_exited_event(head(), out));
  CHECK(exited ==
        with_common({"exit_code", "signal", "oom_killed", "duration_s"}));
  CHECK(keys_of(classified_event(head(), c)) ==
        with_common({"class", "rule", "line", "retry_after_s"}));
  CHECK(keys_of(retry_scheduled_event(head(), 1, 3, "a", 5)) ==
        with_common({"retry_count", "agent", "delay_s", "max_retries"}));
  CHECK(keys_of(agent_switched_event(head(), "a", "b", "why")) ==
        with_common({"from", "to", "reason"}));
  CHECK(keys_of(user_stop_event(head(), stop_mode::cancel, "m")) ==
        with_common({"mode", "message"}));
  auto done = task_done_event(head(), r);
  CHECK(keys_of(done) == with_common({"outcome", "exit_code", "error",
                                      "artifacts", "metadata"}));
  auto meta = boost::json::parse(done.json).at("metadata").as_object();
  std::set<std::string> mkeys;
  for (auto& kv : meta)
    mkeys.insert(std::string{kv.key()});
  CHECK(mkeys == std::set<std::string>{"agent_used", "agent_id", "retry_count",
                                       "total_attempts", "fallback_count"});
  CHECK(keys_of(escalated_event(head(), task_outcome::failed, "p")) ==
        with_common({"outcome", "parent"}));
  CHECK(keys_of(task_submitted_event(head(), "env", {"a"})) ==
        with_common({"environment", "agents"}));
  CHECK(keys_of(log_event(head(), "x")) == with_common({"line"}));
  CHECK(keys_of(warning_event(head(), "cycle")) == with_common({"message"}));
  auto ev = classified_event(head(), c);
  CHECK(ev.kind == event_kind::classified);
  auto obj = boost::json::parse(ev.json).as_object();
  CHECK(obj.at("event").as_string() == "classified");
  CHECK(obj.at("attempt").as_int64() == 2);
  CHECK(obj.at("retry_after_s").to_number<double>() == 30);
  c.retry_after_s.reset();
  CHECK(boost::json::parse(classified_event(head(), c).json)
          .at("retry_after_s")
          .is_null());
}

TEST_CASE("untrusted output stays valid JSON", "[events]") {
  std::string nasty = "quote\" backslash\\ nl\n ctrl\x01 bad\xff\xfe "
                      "truncated\xe2\x82 ok\xe2\x82\xac surrogate\xed\xa0\x80";
  auto ev = log_event(head(), nasty);
  auto line = boost::json::parse(ev.json).at("line").as_string();
  std::string s{line.c_str(), line.size()};
  CHECK(s.find("quote\" backslash\\ nl\n ctrl\x01") == 0);
  CHECK(s.find("\xe2\x82\xac") != std::string::npos); // valid euro sign kept
  CHECK(s.find('\xff') == std::string::npos);
  CHECK(s.find("\xed\xa0\x80") == std::string::npos);
  CHECK(ev.json.find('\n') == std::string::npos); // one line
  CHECK(sanitize_utf8("plain") == "plain");
  CHECK(sanitize_utf8("\xc0\xaf") == "\xEF\xBF\xBD\xEF\xBF\xBD"); // overlong
}

TEST_CASE("trace and span ids have W3C sizes and follow the seed", "[events]") {
  trace_id_generator a{1};
  trace_id_generator b{1};
  auto t = a.trace_id();
  CHECK(t.size() == 32);
  CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(t == b.trace_id());
  auto s = a.span_id();
  CHECK(s.size() == 16);
  CHECK(s != a.span_id());
}

// Event rendering: the keys of docs/BEHAVIOUR.md, Events for every kind, and
// untrusted output kept valid JSON.

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/text.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <variant>
#include <vector>

using namespace tasksup;

namespace {

/// A result whose attempts reported 7 output tokens and $0.50.
std::string r_done_with_usage() {
  task_result r;
  r.task_id = "t";
  r.metadata.usage = token_usage{3, 7, 0};
  r.metadata.cost_usd = 0.5;
  return result_to_json(r);
}

event_head head() {
  event_head h;
  h.task_id = "t1";
  h.attempt = 2;
  h.trace_id = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  h.span_id = "bbbbbbbbbbbbbbbb";
  h.ts = 1700000000.5;
  return h;
}

std::set<std::string> keys_of(const event& ev) {
  std::set<std::string> out;
  auto doc = boost::json::parse(ev.json());
  for (auto& kv : doc.as_object())
    out.insert(std::string{kv.key()});
  return out;
}

std::set<std::string> with_common(std::set<std::string> xs) {
  xs.insert({"event", "task_id", "attempt", "trace_id", "span_id", "ts"});
  return xs;
}

} // namespace

TEST_CASE("every event kind carries its documented keys", "[events]") {
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
  // The task's state directory, when it has one.
  CHECK(
    keys_of(attempt_started_event(head(), "a", "codex", "c1", "/w/t/state")) ==
    with_common({"agent_id", "agent_cli", "container_id", "member_state"}));
  auto exited = keys_of(attempt_exited_event(head(), out));
  CHECK(exited ==
        with_common({"exit_code", "signal", "oom_killed", "duration_s"}));
  CHECK(keys_of(classified_event(head(), c)) ==
        with_common({"class", "rule", "line", "retry_after_s"}));
  // The basic keys, plus where the delay came from and why.
  CHECK(keys_of(retry_scheduled_event(
          head(), 1, 3, "a",
          delay_decision{5, delay_source::schedule, 5, 0, false}, "why")) ==
        with_common({"retry_count", "agent", "delay_s", "max_retries",
                     "delay_source", "scheduled_s", "capped", "reason",
                     "restart", "ran_s", "stable"}));
  CHECK(keys_of(agent_switched_event(head(), "a", "b", "why")) ==
        with_common({"from", "to", "reason", "cause"}));
  CHECK(keys_of(user_stop_event(head(), stop_mode::cancel, "m")) ==
        with_common({"mode", "message"}));
  auto done = task_done_event(head(), r);
  CHECK(keys_of(done) == with_common({"outcome", "exit_code", "error",
                                      "artifacts", "metadata"}));
  auto meta = boost::json::parse(done.json()).at("metadata").as_object();
  std::set<std::string> mkeys;
  for (auto& kv : meta)
    mkeys.insert(std::string{kv.key()});
  // Usage and cost appear once an attempt reported them.
  auto with_usage = r_done_with_usage();
  auto umeta = boost::json::parse(with_usage).at("metadata").as_object();
  CHECK(umeta.at("usage").at("output_tokens").as_int64() == 7);
  CHECK(umeta.at("cost_usd").to_number<double>() == 0.5);
  // The basic keys, plus the task's retries in total and per agent.
  CHECK(mkeys == std::set<std::string>{"agent_used", "agent_id", "retry_count",
                                       "total_attempts", "fallback_count",
                                       "total_retries", "retries_by_agent"});
  CHECK(keys_of(escalated_event(head(), task_outcome::failed, "p")) ==
        with_common({"outcome", "parent"}));
  CHECK(keys_of(task_submitted_event(head(), "env", {"a"})) ==
        with_common({"environment", "agents"}));
  CHECK(keys_of(log_event(head(), "x")) == with_common({"stream", "line"}));
  CHECK(keys_of(warning_event(head(), "cycle")) == with_common({"message"}));
  auto ev = classified_event(head(), c);
  CHECK(ev.kind == event_kind::classified);
  auto obj = boost::json::parse(ev.json()).as_object();
  CHECK(obj.at("event").as_string() == "classified");
  CHECK(obj.at("attempt").as_int64() == 2);
  CHECK(obj.at("retry_after_s").to_number<double>() == 30);
  c.retry_after_s.reset();
  CHECK(boost::json::parse(classified_event(head(), c).json())
          .at("retry_after_s")
          .is_null());
}

TEST_CASE("long output lines are written whole, escapes and all", "[events]") {
  // Far beyond the writer's first buffer: plain text, then text where every
  // byte needs an escape (the worst case grows the output sixfold).
  std::string plain(100000, 'x');
  auto p = boost::json::parse(log_event(head(), plain).json());
  CHECK(p.at("line").as_string() == plain);
  std::string ctrl;
  for (int i = 0; i < 20000; ++i)
    ctrl.push_back(static_cast<char>(i % 32));
  auto ev = log_event(head(), ctrl);
  auto c = boost::json::parse(ev.json()).at("line").as_string();
  CHECK(std::string(c.c_str(), c.size()) == ctrl);
  // The writer's buffer grew as the escapes needed; the event travels
  // without the slack.
  CHECK(ev.json().capacity() <= ev.json().size() + 1024);
  CHECK(ev.json().find('\n') == std::string::npos);
}

TEST_CASE("every byte at every position of a word is escaped as Boost.JSON "
          "would",
          "[events]") {
  // The writer checks strings eight bytes at a time: a byte that needs an
  // escape must be found wherever it sits in a word or the tail.
  for (int b = 0; b < 256; ++b)
    for (std::size_t pos = 0; pos < 19; ++pos) {
      std::string s(19, 'a');
      s[pos] = static_cast<char>(b);
      auto expected = "\"line\":" + boost::json::serialize(
                                      boost::json::string(sanitize_utf8(s)));
      auto json = log_event(head(), s).json();
      INFO("byte " << b << " at " << pos);
      CHECK(json.find(expected) != std::string::npos);
    }
}

TEST_CASE("untrusted output stays valid JSON", "[events]") {
  std::string nasty = "quote\" backslash\\ nl\n ctrl\x01 bad\xff\xfe "
                      "truncated\xe2\x82 ok\xe2\x82\xac surrogate\xed\xa0\x80";
  auto ev = log_event(head(), nasty);
  auto line = boost::json::parse(ev.json()).at("line").as_string();
  std::string s{line.c_str(), line.size()};
  CHECK(s.find("quote\" backslash\\ nl\n ctrl\x01") == 0);
  CHECK(s.find("\xe2\x82\xac") != std::string::npos); // valid euro sign kept
  CHECK(s.find('\xff') == std::string::npos);
  CHECK(s.find("\xed\xa0\x80") == std::string::npos);
  CHECK(ev.json().find('\n') == std::string::npos); // one line
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

TEST_CASE("attempt_exited carries the attempt's usage and cost, only when "
          "known",
          "[events]") {
  attempt_outcome out;
  out.exit_code = 1;
  // No structured output (a text agent): no usage keys at all.
  auto plain = keys_of(attempt_exited_event(head(), out));
  CHECK(plain.count("usage") == 0);
  CHECK(plain.count("cost_usd") == 0);
  // Structured output that reported neither (codex on an early error).
  out.structured.emplace();
  auto none = keys_of(attempt_exited_event(head(), out));
  CHECK(none.count("usage") == 0);
  CHECK(none.count("cost_usd") == 0);
  // Usage without a cost (codex, gemini).
  out.structured->usage = token_usage{1200, 345, 1000};
  auto ev =
    boost::json::parse(attempt_exited_event(head(), out).json()).as_object();
  REQUIRE(ev.contains("usage"));
  const auto& u = ev.at("usage").as_object();
  CHECK(u.at("input_tokens").as_int64() == 1200);
  CHECK(u.at("output_tokens").as_int64() == 345);
  CHECK(u.at("cached_input_tokens").as_int64() == 1000);
  CHECK_FALSE(ev.contains("cost_usd"));
  // And a cost (claude).
  out.structured->cost_usd = 0.0123;
  ev = boost::json::parse(attempt_exited_event(head(), out).json()).as_object();
  CHECK(ev.at("cost_usd").to_number<double>() == 0.0123);
  CHECK(ev.at("exit_code").as_int64() == 1);
}

TEST_CASE("event values have their documented types, absent means null",
          "[events]") {
  attempt_outcome out;
  out.exit_code = 137;
  out.signal = 9;
  out.oom_killed = true;
  out.duration_s = 1.5;
  auto ex =
    boost::json::parse(attempt_exited_event(head(), out).json()).as_object();
  CHECK(ex.at("exit_code").as_int64() == 137);
  CHECK(ex.at("signal").as_int64() == 9);
  CHECK(ex.at("oom_killed").as_bool());
  CHECK(ex.at("duration_s").to_number<double>() == 1.5);
  CHECK(ex.at("ts").to_number<double>() == 1700000000.5);
  CHECK(ex.at("trace_id").as_string() == std::string(32, 'a'));
  auto st = boost::json::parse(
              attempt_started_event(head(), "a", "codex", "4242").json())
              .as_object();
  CHECK(st.at("container_id").as_string() == "4242");
  auto rs =
    boost::json::parse(
      retry_scheduled_event(
        head(), 1, 3, "a",
        delay_decision{5, delay_source::retry_after_hint, 60, 0, true}, "why")
        .json())
      .as_object();
  CHECK(rs.at("delay_source").as_string() == "retry_after_hint");
  CHECK(rs.at("scheduled_s").to_number<double>() == 60);
  CHECK(rs.at("capped").as_bool());
  CHECK(rs.at("retry_count").as_int64() == 1);
  CHECK(rs.at("agent").as_string() == "a");
  CHECK(rs.at("delay_s").to_number<double>() == 5);
  task_result ok;
  ok.task_id = "t1";
  ok.outcome = task_outcome::succeeded;
  ok.exit_code = 0;
  ok.metadata.agent_used = "codex";
  ok.metadata.agent_id = "a";
  ok.metadata.retry_count = 1;
  ok.metadata.total_attempts = 2;
  ok.metadata.fallback_count = 0;
  auto done =
    boost::json::parse(task_done_event(head(), ok).json()).as_object();
  CHECK(done.at("outcome").as_string() == "succeeded");
  CHECK(done.at("exit_code").as_int64() == 0);
  CHECK(done.at("error").is_null()); // present, null on success
  CHECK(done.at("artifacts").as_array().empty());
  auto& meta = done.at("metadata").as_object();
  CHECK(meta.at("agent_used").as_string() == "codex");
  CHECK(meta.at("agent_id").as_string() == "a");
  CHECK(meta.at("retry_count").as_int64() == 1);
  CHECK(meta.at("total_attempts").as_int64() == 2);
  CHECK(meta.at("fallback_count").as_int64() == 0);
  ok.error = "boom";
  ok.outcome = task_outcome::stopped;
  auto stopped =
    boost::json::parse(task_done_event(head(), ok).json()).as_object();
  CHECK(stopped.at("error").as_string() == "boom");
  CHECK(stopped.at("outcome").as_string() == "stopped");
  CHECK(boost::json::parse(user_stop_event(head(), stop_mode::kill, "m").json())
          .at("mode")
          .as_string() == "kill");
}

namespace {

// The reference rendering: the same object built with boost::json::object and
// serialized by Boost.JSON, as events were rendered before the direct writer.
boost::json::string ref_str(std::string_view s) {
  return boost::json::string{sanitize_utf8(s)};
}

boost::json::object ref_head(std::string_view kind, const event_head& h) {
  boost::json::object obj;
  obj["event"] = kind;
  obj["task_id"] = ref_str(h.task_id);
  obj["attempt"] = h.attempt;
  obj["trace_id"] = h.trace_id;
  obj["span_id"] = h.span_id;
  obj["ts"] = h.ts;
  return obj;
}

boost::json::object ref_result(const task_result& r) {
  boost::json::object obj;
  obj["outcome"] = to_string(r.outcome);
  obj["exit_code"] = r.exit_code;
  if (r.error)
    obj["error"] = ref_str(*r.error);
  else
    obj["error"] = nullptr;
  boost::json::array artifacts;
  for (auto& a : r.artifacts)
    artifacts.emplace_back(ref_str(a));
  obj["artifacts"] = std::move(artifacts);
  boost::json::object meta;
  meta["agent_used"] = ref_str(r.metadata.agent_used);
  meta["agent_id"] = ref_str(r.metadata.agent_id);
  meta["retry_count"] = r.metadata.retry_count;
  meta["total_attempts"] = r.metadata.total_attempts;
  meta["fallback_count"] = r.metadata.fallback_count;
  meta["total_retries"] = r.metadata.total_retries;
  boost::json::object per_agent;
  for (auto& [agent, n] : r.metadata.retries_by_agent)
    per_agent[agent] = n;
  meta["retries_by_agent"] = std::move(per_agent);
  obj["metadata"] = std::move(meta);
  return obj;
}

/// Deterministic awkward inputs: every byte value, truncated and overlong
/// UTF-8 sequences, surrogates, control characters, quotes, backslashes.
struct input_source {
  std::uint64_t state;

  std::uint64_t next() {
    auto z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  std::string text() {
    static const std::vector<std::string> pieces = {"a",
                                                    "Z9",
                                                    " ",
                                                    "\"",
                                                    "\\",
                                                    "\n",
                                                    "\r\t",
                                                    "\b\f",
                                                    std::string(1, '\0'),
                                                    "\x01",
                                                    "\x1f",
                                                    "\x7f",
                                                    "\xe2\x82\xac",
                                                    "\xf0\x9f\x98\x80",
                                                    "\xc3\xa9",
                                                    "\xe2\x82",
                                                    "\xff",
                                                    "\xc0\xaf",
                                                    "\xed\xa0\x80",
                                                    "\xf4\x90\x80\x80",
                                                    "\x80",
                                                    "\xf0\x9f",
                                                    "/",
                                                    "\xef\xbf\xbd"};
    std::string s;
    auto n = next() % 12;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (next() % 4 == 0)
        s.push_back(static_cast<char>(next() % 256));
      else
        s += pieces[next() % pieces.size()];
    }
    return s;
  }

  double number() {
    static const double specials[] = {0.0,
                                      -0.0,
                                      1.5,
                                      1700000000.5,
                                      1763790000.123456,
                                      0.1,
                                      1e-300,
                                      1e300,
                                      5e-324,
                                      -2.5,
                                      30,
                                      std::numeric_limits<double>::max(),
                                      std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN()};
    auto k = next() % 20;
    if (k < std::size(specials))
      return specials[k];
    double d;
    auto bits = next();
    std::memcpy(&d, &bits, sizeof(d));
    return k % 2 ? d : static_cast<double>(next() % 100000) / 1000.0;
  }

  int integer() {
    static const int specials[] = {0,
                                   -1,
                                   1,
                                   137,
                                   std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max()};
    auto k = next() % 10;
    if (k < std::size(specials))
      return specials[k];
    return static_cast<int>(next());
  }
};

/// The reference number spelling: the shortest round-trip digits in plain
/// notation with a fraction, `null` for what JSON cannot spell.
std::string ref_number(double x) {
  if (!std::isfinite(x))
    return "null";
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::fixed);
  std::string out{buf, r.ptr};
  if (out.find('.') == std::string::npos)
    out += ".0";
  return out;
}

/// Boost.JSON's serialization, except for doubles (`ref_number`).
std::string ser_value(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::double_:
      return ref_number(v.get_double());
    case boost::json::kind::object: {
      std::string out = "{";
      for (auto& kv : v.get_object()) {
        if (out.size() > 1)
          out += ',';
        out += boost::json::serialize(boost::json::string{kv.key()});
        out += ':';
        out += ser_value(kv.value());
      }
      return out + "}";
    }
    case boost::json::kind::array: {
      std::string out = "[";
      for (auto& x : v.get_array()) {
        if (out.size() > 1)
          out += ',';
        out += ser_value(x);
      }
      return out + "]";
    }
    default:
      return boost::json::serialize(v);
  }
}

std::string ser(const boost::json::object& obj) {
  return ser_value(obj);
}

} // namespace

TEST_CASE("event numbers are plain decimals, never in exponent form",
          "[events]") {
  auto ts_of = [](double ts) {
    event_head h;
    h.task_id = "t";
    h.trace_id = "0123456789abcdef0123456789abcdef";
    h.span_id = "0123456789abcdef";
    h.ts = ts;
    auto json = warning_event(h, "m").json();
    auto at = json.find("\"ts\":") + 5;
    return json.substr(at, json.find(',', at) - at);
  };
  CHECK(ts_of(1795362464.5893607) == "1795362464.5893607");
  CHECK(ts_of(30) == "30.0");
  CHECK(ts_of(0.1) == "0.1");
  CHECK(ts_of(-2.5) == "-2.5");
  CHECK(ts_of(1e-7) == "0.0000001");
  CHECK(ts_of(std::numeric_limits<double>::infinity()) == "null");
  // Every finite double reads back as itself (through strtod: Boost.JSON's
  // own parser rounds numbers near DBL_MAX to infinity).
  for (double x :
       {1e300, 5e-324, std::numeric_limits<double>::max(), 1763790000.123456}) {
    auto text = ts_of(x);
    CHECK(text.find_first_of("eE") == std::string::npos);
    CHECK(std::strtod(text.c_str(), nullptr) == x);
  }
}

TEST_CASE("events render byte for byte as Boost.JSON would", "[events]") {
  input_source in{42};
  for (int round = 0; round < 2000; ++round) {
    // The head's strings are views: keep them alive for the round.
    auto task_id = in.text();
    auto attempt = in.integer();
    auto trace_id = in.text();
    auto span_id = in.text();
    event_head h;
    h.task_id = task_id;
    h.attempt = attempt;
    h.trace_id = trace_id;
    h.span_id = span_id;
    h.ts = in.number();
    INFO("round " << round);

    auto env = in.text();
    std::vector<std::string> agents(in.next() % 4);
    for (auto& a : agents)
      a = in.text();
    auto obj = ref_head("task_submitted", h);
    obj["environment"] = ref_str(env);
    boost::json::array ids;
    for (auto& a : agents)
      ids.emplace_back(ref_str(a));
    obj["agents"] = std::move(ids);
    CHECK(task_submitted_event(h, env, agents).json() == ser(obj));

    auto s1 = in.text();
    auto s2 = in.text();
    auto s3 = in.text();
    obj = ref_head("attempt_started", h);
    obj["agent_id"] = ref_str(s1);
    obj["agent_cli"] = ref_str(s2);
    obj["container_id"] = ref_str(s3);
    CHECK(attempt_started_event(h, s1, s2, s3).json() == ser(obj));

    obj = ref_head("log", h);
    obj["stream"] = "stderr";
    obj["line"] = ref_str(s1);
    CHECK(log_event(h, s1, "stderr").json() == ser(obj));

    attempt_outcome out;
    out.exit_code = in.integer();
    out.signal = in.integer();
    out.oom_killed = in.next() % 2 == 0;
    out.duration_s = in.number();
    if (in.next() % 2)
      out.infrastructure_error = in.text();
    obj = ref_head("attempt_exited", h);
    obj["exit_code"] = out.exit_code;
    obj["signal"] = out.signal;
    obj["oom_killed"] = out.oom_killed;
    obj["duration_s"] = out.duration_s;
    if (!out.infrastructure_error.empty())
      obj["infrastructure_error"] = ref_str(out.infrastructure_error);
    if (in.next() % 2) {
      out.structured.emplace();
      if (in.next() % 2)
        out.structured->usage =
          token_usage{in.integer(), in.integer(), in.integer()};
      if (in.next() % 2)
        out.structured->cost_usd = in.number();
      if (const auto& u = out.structured->usage)
        obj["usage"] = {{"input_tokens", u->input_tokens},
                        {"output_tokens", u->output_tokens},
                        {"cached_input_tokens", u->cached_input_tokens}};
      if (out.structured->cost_usd)
        obj["cost_usd"] = *out.structured->cost_usd;
    }
    CHECK(attempt_exited_event(h, out).json() == ser(obj));

    classification c;
    c.cls = static_cast<error_class>(in.next() % 3);
    c.rule = in.text();
    c.line = in.text();
    if (in.next() % 2)
      c.retry_after_s = in.number();
    obj = ref_head("classified", h);
    obj["class"] = to_string(c.cls);
    obj["rule"] = ref_str(c.rule);
    obj["line"] = ref_str(c.line);
    if (c.retry_after_s)
      obj["retry_after_s"] = *c.retry_after_s;
    else
      obj["retry_after_s"] = nullptr;
    CHECK(classified_event(h, c).json() == ser(obj));

    auto rc = in.integer();
    auto mr = in.integer();
    auto delay = in.number();
    obj = ref_head("retry_scheduled", h);
    obj["retry_count"] = rc;
    obj["agent"] = ref_str(s2);
    obj["delay_s"] = delay;
    obj["max_retries"] = mr;
    obj["delay_source"] = "jitter";
    obj["scheduled_s"] = delay;
    obj["capped"] = false;
    obj["reason"] = ref_str(s3);
    obj["restart"] = 0;
    obj["ran_s"] = delay;
    obj["stable"] = true;
    CHECK(retry_scheduled_event(
            h, rc, mr, s2,
            delay_decision{delay, delay_source::jitter, delay, 0, false}, s3, 0,
            delay, true)
            .json() == ser(obj));

    obj = ref_head("agent_switched", h);
    obj["from"] = ref_str(s1);
    obj["to"] = ref_str(s2);
    obj["reason"] = ref_str(s3);
    obj["cause"] = ref_str(s1);
    CHECK(agent_switched_event(h, s1, s2, s3, s1).json() == ser(obj));

    auto mode = in.next() % 2 ? stop_mode::kill : stop_mode::cancel;
    obj = ref_head("user_stop", h);
    obj["mode"] = to_string(mode);
    obj["message"] = ref_str(s3);
    CHECK(user_stop_event(h, mode, s3).json() == ser(obj));

    task_result r;
    r.task_id = in.text();
    r.outcome = in.next() % 2 ? task_outcome::failed : task_outcome::succeeded;
    r.exit_code = in.integer();
    if (in.next() % 2)
      r.error = in.text();
    r.artifacts.resize(in.next() % 3);
    for (auto& a : r.artifacts)
      a = in.text();
    r.metadata.agent_used = in.text();
    r.metadata.agent_id = in.text();
    r.metadata.retry_count = in.integer();
    r.metadata.total_attempts = in.integer();
    r.metadata.fallback_count = in.integer();
    obj = ref_head("task_done", h);
    for (auto& kv : ref_result(r))
      obj[kv.key()] = kv.value();
    CHECK(task_done_event(h, r).json() == ser(obj));
    auto res = ref_result(r);
    res["task_id"] = ref_str(r.task_id);
    CHECK(result_to_json(r) == ser(res));

    obj = ref_head("escalated", h);
    obj["outcome"] = to_string(r.outcome);
    obj["parent"] = ref_str(s1);
    CHECK(escalated_event(h, r.outcome, s1).json() == ser(obj));

    obj = ref_head("warning", h);
    obj["message"] = ref_str(s2);
    CHECK(warning_event(h, s2).json() == ser(obj));
  }
}

TEST_CASE("an event's typed keys hold the values its JSON carries, "
          "untrusted text repaired alike",
          "[events]") {
  auto line = std::string{"bad \xff\xfe byte, \"quotes\"\n"};
  auto ev = log_event(head(), line, "stderr");
  REQUIRE(ev.fields() != nullptr);
  auto& typed = std::get<event_data::log>(ev.fields()->data);
  auto obj = boost::json::parse(ev.json()).as_object();
  CHECK(typed.line == std::string{obj.at("line").as_string()});
  CHECK(typed.line.find("\xEF\xBF\xBD") != std::string::npos);
  CHECK(typed.stream == "stderr");

  classification c;
  c.cls = error_class::rate_limit;
  c.rule = "rl";
  c.line = "429";
  c.retry_after_s = 12.5;
  auto cl = classified_event(head(), c);
  auto& tc = std::get<event_data::classified>(cl.fields()->data).c;
  CHECK(tc.cls == error_class::rate_limit);
  CHECK(tc.rule == "rl");
  CHECK(tc.retry_after_s == 12.5);

  task_result r;
  r.task_id = "t1";
  r.error = std::string{"broke \xc3"};
  r.artifacts = {"/a\xff"};
  r.metadata.retries_by_agent = {{"a", 2}};
  auto done = task_done_event(head(), r);
  auto& tr = std::get<event_data::task_done>(done.fields()->data).result();
  auto dobj = boost::json::parse(done.json()).as_object();
  CHECK(*tr.error == std::string{dobj.at("error").as_string()});
  CHECK(tr.artifacts.at(0) ==
        std::string{dobj.at("artifacts").as_array().at(0).as_string()});
  CHECK(tr.metadata.retries_by_agent.at("a") == 2);
}

TEST_CASE("an event renders its JSON once, shared by every copy, and "
          "travels as that JSON",
          "[events]") {
  auto line = std::string{"bad \xff byte, \"quotes\""};
  auto a = log_event(head(), line, "stderr");
  auto copy = a;
  // Whichever copy asks first renders it; the others read the same text.
  auto& first = copy.json();
  CHECK(&a.json() == &first);
  CHECK(boost::json::parse(first).at("line").as_string() ==
        "bad \xEF\xBF\xBD byte, \"quotes\"");
  CHECK(a.trace_id() == "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  CHECK(a.span_id() == "bbbbbbbbbbbbbbbb");
  // Across the wire (or from the journal) the JSON is the event: no typed
  // keys, the same text and ids.
  std::vector<char> buf;
  {
    caf::actor_system_config cfg;
    register_protocol(cfg);
    caf::actor_system sys{cfg};
    caf::binary_serializer sink{sys, buf};
    REQUIRE(!sink(a));
    event b;
    caf::binary_deserializer source{sys, buf};
    REQUIRE(!source(b));
    CHECK(b.fields() == nullptr);
    CHECK(b.json() == a.json());
    CHECK(b.trace_id() == a.trace_id());
    CHECK(b.span_id() == a.span_id());
    CHECK(b.task_id == a.task_id);
    CHECK(b.ts == a.ts);
  }
  // Ids longer than the W3C sizes are kept whole.
  auto long_ids =
    json_event_body(std::string(40, 'c'), std::string(20, 'd'), "{}");
  event c;
  c.body = long_ids;
  CHECK(c.trace_id() == std::string(40, 'c'));
  CHECK(c.span_id() == std::string(20, 'd'));
  CHECK(c.json() == "{}");
  // A default event has no body and empty JSON.
  CHECK(event{}.json().empty());
  CHECK(event{}.fields() == nullptr);
}

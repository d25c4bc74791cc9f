#include "tasksup/supervisor/output_parser.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

/// Feeds a saved real CLI log (tests/fixtures/agent-logs/) line by line and
/// returns the parser plus everything it showed.
struct fed {
  structured_result result;
  std::vector<std::string> shown;
};

fed feed_log(output_format format, const std::string& name) {
  std::ifstream in{std::string{TASKSUP_FIXTURES_DIR} + "/agent-logs/" + name};
  REQUIRE(in);
  output_parser p{format};
  fed out;
  std::string line;
  while (std::getline(in, line))
    if (auto s = p.feed(line); !s.empty())
      out.shown.push_back(std::move(s));
  out.result = p.result();
  return out;
}

bool any_shown_contains(const fed& f, const std::string& needle) {
  for (const auto& s : f.shown)
    if (s.find(needle) != std::string::npos)
      return true;
  return false;
}

bool any_raw_json(const fed& f) {
  for (const auto& s : f.shown)
    if (!s.empty() && s.front() == '{')
      return true;
  return false;
}

classification structured_class(const structured_result& r) {
  REQUIRE(r.error);
  auto c = classify_structured(*r.error, {});
  REQUIRE(c);
  return *c;
}

} // namespace

TEST_CASE("output formats round-trip through their names") {
  for (auto f : {output_format::text, output_format::claude_stream_json,
                 output_format::codex_jsonl, output_format::gemini_json})
    CHECK(parse_output_format(to_string(f)) == f);
  CHECK_FALSE(parse_output_format("json"));
  CHECK_FALSE(parse_output_format(""));
}

TEST_CASE("claude stream-json: final message, usage and cost, no raw JSON") {
  auto f = feed_log(output_format::claude_stream_json, "claude-ok-json.log");
  CHECK(f.result.final_message == "Done: the fake provider says hello.");
  REQUIRE(f.result.usage);
  CHECK(f.result.usage->input_tokens == 12);
  CHECK(f.result.usage->output_tokens == 8);
  REQUIRE(f.result.cost_usd);
  CHECK(*f.result.cost_usd == Approx(0.000208));
  CHECK_FALSE(f.result.error);
  CHECK(any_shown_contains(f, "assistant: Done"));
  CHECK_FALSE(any_raw_json(f));
}

TEST_CASE("claude stream-json: each provider error becomes a class") {
  struct row {
    const char* log;
    int status;
    const char* type;
    error_class cls;
  };
  for (auto r : {
         row{"claude-auth-json.log", 401, "authentication_error",
             error_class::fatal},
         row{"claude-forbidden-json.log", 403, "permission_error",
             error_class::fatal},
         row{"claude-rate-json.log", 429, "rate_limit_error",
             error_class::rate_limit},
         row{"claude-overloaded-json.log", 529, "overloaded_error",
             error_class::retryable},
         row{"claude-unavailable-json.log", 503, "api_error",
             error_class::retryable},
         row{"claude-billing-json.log", 400, "billing_error",
             error_class::agent_failure},
         row{"claude-drop-json.log", 0, "server_error", error_class::retryable},
       }) {
    INFO(r.log);
    auto f = feed_log(output_format::claude_stream_json, r.log);
    REQUIRE(f.result.error);
    CHECK(f.result.error->http_status == r.status);
    CHECK(f.result.error->type == r.type);
    CHECK_FALSE(f.result.error->message.empty());
    auto c = structured_class(f.result);
    CHECK(c.cls == r.cls);
    CHECK(c.rule == std::string{"structured:"} + r.type);
    CHECK_FALSE(any_raw_json(f));
  }
}

TEST_CASE("codex --json: message, usage, and errors by status or text") {
  auto ok = feed_log(output_format::codex_jsonl, "codex-ok-json.log");
  CHECK(ok.result.final_message == "Done: the fake provider says hello.");
  REQUIRE(ok.result.usage);
  CHECK(ok.result.usage->input_tokens == 12);
  CHECK(ok.result.usage->output_tokens == 8);
  CHECK_FALSE(ok.result.cost_usd);
  CHECK_FALSE(any_raw_json(ok));

  auto auth = feed_log(output_format::codex_jsonl, "codex-auth-json.log");
  REQUIRE(auth.result.error);
  CHECK(auth.result.error->http_status == 401);
  auto c = structured_class(auth.result);
  CHECK(c.cls == error_class::fatal);
  CHECK(c.rule == "structured:http_401");

  auto unavailable =
    feed_log(output_format::codex_jsonl, "codex-unavailable-json.log");
  CHECK(structured_class(unavailable.result).cls == error_class::retryable);

  // "Quota exceeded. Check your plan and billing details." has neither type
  // nor status: the text rules decide (billing -> agent_failure).
  auto billing = feed_log(output_format::codex_jsonl, "codex-billing-json.log");
  REQUIRE(billing.result.error);
  CHECK_FALSE(classify_structured(*billing.result.error, {}));
  // "last status: 429" alone is ambiguous too.
  auto rate = feed_log(output_format::codex_jsonl, "codex-rate-json.log");
  REQUIRE(rate.result.error);
  CHECK(rate.result.error->http_status == 429);
  CHECK_FALSE(classify_structured(*rate.result.error, {}));
}

TEST_CASE("gemini json: the envelope's response, usage and nested API error") {
  auto ok = feed_log(output_format::gemini_json, "gemini-ok-json.log");
  CHECK(ok.result.final_message == "Done: the fake provider says hello.");
  REQUIRE(ok.result.usage);
  CHECK(ok.result.usage->input_tokens == 12);
  CHECK(ok.result.usage->output_tokens == 8);
  CHECK_FALSE(any_raw_json(ok));

  auto auth = feed_log(output_format::gemini_json, "gemini-auth-json.log");
  REQUIRE(auth.result.error);
  CHECK(auth.result.error->http_status == 400);
  CHECK(auth.result.error->type == "API_KEY_INVALID");
  CHECK(auth.result.error->message ==
        "API key not valid. Please pass a valid API key.");
  CHECK(structured_class(auth.result).cls == error_class::fatal);

  auto forbidden =
    feed_log(output_format::gemini_json, "gemini-forbidden-json.log");
  CHECK(structured_class(forbidden.result).rule ==
        "structured:PERMISSION_DENIED");

  auto overloaded =
    feed_log(output_format::gemini_json, "gemini-overloaded-json.log");
  auto c = structured_class(overloaded.result);
  CHECK(c.cls == error_class::retryable);
  CHECK(c.rule == "structured:http_503");

  // A bare 429 may be an empty account: left to the text rules.
  auto billing =
    feed_log(output_format::gemini_json, "gemini-billing-json.log");
  REQUIRE(billing.result.error);
  CHECK(billing.result.error->http_status == 429);
  CHECK_FALSE(classify_structured(*billing.result.error, {}));
}

TEST_CASE("structured output: garbage and oversized input are ignored") {
  output_parser claude{output_format::claude_stream_json};
  CHECK(claude.feed("not json") == "not json");
  CHECK(claude.feed("{\"type\": \"result\", \"is_error\": tr") ==
        "{\"type\": \"result\", \"is_error\": tr");
  CHECK(claude
          .feed("{\"type\":\"result\",\"usage\":{\"input_tokens\":-5,"
                "\"output_tokens\":1e300},\"total_cost_usd\":-1}")
          .rfind("done", 0) == 0);
  REQUIRE(claude.result().usage);
  CHECK(claude.result().usage->input_tokens == 0);
  CHECK(claude.result().usage->output_tokens == 0);
  CHECK_FALSE(claude.result().cost_usd);

  output_parser gemini{output_format::gemini_json};
  CHECK(gemini.feed("{").empty());
  std::string big(max_structured_doc_bytes / 4, 'x');
  for (int i = 0; i < 5; ++i)
    gemini.feed("  \"k\": \"" + big + "\",");
  CHECK(gemini.feed("}").empty());
  CHECK_FALSE(gemini.result().error);
  // A later envelope still parses.
  gemini.feed("{");
  gemini.feed("  \"response\": \"hi\"");
  gemini.feed("}");
  CHECK(gemini.result().final_message == "hi");

  output_parser text{output_format::text};
  CHECK(text.feed("{\"type\":\"result\"}") == "{\"type\":\"result\"}");
  CHECK_FALSE(text.result().error);
}

TEST_CASE("classify_attempt: structured error first, crashes still win") {
  auto rules = classifier::make(default_classifier_rules());
  REQUIRE(rules);
  attempt_outcome out;
  out.exit_code = 1;
  out.tail = {"some unrelated text"};
  structured_result r;
  structured_error e;
  e.http_status = 429;
  e.type = "rate_limit_error";
  e.message = "slow down";
  e.retry_after_s = 12;
  r.error = e;
  out.structured = r;
  auto c = classify_attempt(*rules, out, "claude", {});
  CHECK(c.cls == error_class::rate_limit);
  CHECK(c.rule == "structured:rate_limit_error");
  REQUIRE(c.retry_after_s);
  CHECK(*c.retry_after_s == 12);

  out.oom_killed = true;
  CHECK(classify_attempt(*rules, out, "claude", {}).cls ==
        error_class::container_crash);

  out.oom_killed = false;
  out.structured->error->type = "something_new";
  out.structured->error->http_status = 418;
  CHECK(classify_attempt(*rules, out, "claude", {}).rule == "default");
}

TEST_CASE("structured output: numbers at the edges are bounded where they "
          "enter") {
  auto claude = [](const std::string& cost, const std::string& tokens) {
    output_parser p{output_format::claude_stream_json};
    p.feed(R"({"type":"result","result":"ok","total_cost_usd":)" + cost +
           R"(,"usage":{"input_tokens":)" + tokens + R"(,"output_tokens":1}})");
    return p.result();
  };
  // The issue's line: a cost of 1e308 and 9e18 input tokens.
  auto r = claude("1e308", "9000000000000000000");
  REQUIRE(r.cost_usd);
  CHECK(*r.cost_usd == max_cost_usd);
  REQUIRE(r.usage);
  CHECK(r.usage->input_tokens == 9000000000000000000);
  // JSON's huge exponents parse to infinity: clamped, never kept.
  CHECK(claude("1e999", "1").cost_usd == max_cost_usd);
  // A negative cost or count is not a cost or a count.
  CHECK_FALSE(claude("-1e999", "1").cost_usd);
  CHECK(claude("1", "-5").usage->input_tokens == 0);
  // -0 is 0, not a negative zero printed as "-0".
  auto zero = claude("-0", "0").cost_usd;
  REQUIRE(zero);
  CHECK_FALSE(std::signbit(*zero));
  // 2^63 does not fit a count: left out rather than wrapped.
  CHECK(claude("0", "9223372036854775808").usage->input_tokens == 0);
  CHECK(claude("0", "9223372036854775807").usage->input_tokens == INT64_MAX);

  // gemini sums the models of one attempt: the sum saturates.
  output_parser gemini{output_format::gemini_json};
  for (
    const char* line :
    {"{", R"("response": "ok",)",
     R"("stats": {"models": {"a": {"tokens": {"prompt": 9000000000000000000,)"
     R"( "candidates": 1}}, "b": {"tokens": {"prompt": 9000000000000000000,)"
     R"( "candidates": 1}}}})",
     "}"})
    gemini.feed(line);
  REQUIRE(gemini.result().usage);
  CHECK(gemini.result().usage->input_tokens == INT64_MAX);
  CHECK(gemini.result().usage->output_tokens == 2);
}

TEST_CASE("token and cost sums saturate instead of overflowing") {
  token_usage a{INT64_MAX - 1, 5, 0};
  a += token_usage{9000000000000000000, 5, INT64_MAX};
  CHECK(a.input_tokens == INT64_MAX);
  CHECK(a.output_tokens == 10);
  CHECK(a.cached_input_tokens == INT64_MAX);
  CHECK(add_cost(1e308, 1e308) == max_cost_usd);
  CHECK(add_cost(0.25, 0.5) == 0.75);
  CHECK(add_cost(std::nan(""), 1) == 1);
  CHECK(add_cost(-std::numeric_limits<double>::infinity(), 2) == 2);
  CHECK(saturating_add(INT64_MIN, -1) == INT64_MIN);
}

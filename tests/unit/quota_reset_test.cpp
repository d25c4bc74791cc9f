// parse_quota_reset (libsupervisor/core/src/quota_reset.cpp) and the rules that
// classify a usage or plan limit, with a fixed `now`: 2026-11-27 23:29:00
// UTC, a Friday (Berlin is UTC+1, New York UTC-5, Sydney UTC+11 then).

#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/output_parser.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

using std::chrono::seconds;
using std::chrono::system_clock;

/// 2026-11-27T23:29:00Z.
constexpr int64_t now_unix = 1795822140;

system_clock::time_point at_unix(int64_t t) {
  return system_clock::time_point{seconds{t}};
}

const system_clock::time_point now = at_unix(now_unix);

std::optional<double> reset(std::string_view line,
                            system_clock::time_point when = now) {
  return parse_quota_reset(line, when);
}

constexpr double hour = 3600;
constexpr double minute = 60;

attempt_outcome failed(std::vector<std::string> tail) {
  attempt_outcome out;
  out.exit_code = 1;
  out.tail = std::move(tail);
  return out;
}

classification classify(std::vector<std::string> tail,
                        std::string_view agent_cli = "claude") {
  static const classifier cls = *classifier::make(default_classifier_rules());
  return cls.classify(failed(std::move(tail)), agent_cli, now);
}

} // namespace

TEST_CASE("quota reset: the real CLIs' wordings") {
  // claude 2.1.330 with a subscription, TZ=Europe/Berlin: 02:10 UTC.
  CHECK(reset("You've hit your 5-hour limit · resets 3:10am (Europe/Berlin)") ==
        2 * hour + 41 * minute);
  // codex 0.169.0: local time, no zone (read as UTC).
  CHECK(reset("ERROR: You’ve hit your usage limit. Upgrade to Pro "
              "(https://chatgpt.com/explore/pro), visit "
              "https://chatgpt.com/settings/usage to purchase more credits or "
              "try again at Nov 28th, 2026 2:10 AM.") ==
        2 * hour + 41 * minute);
  // OpenAI's error body and claude's rate_limit_info.
  CHECK(reset(R"({"type":"usage_limit_reached","resets_in_seconds": 7980})") ==
        7980);
  CHECK(
    reset(R"("rate_limit_info":{"status":"rejected","resetsAt":1795831800})") ==
    2 * hour + 41 * minute);
  // Claude Code's old form: the reset as a Unix time after a '|'.
  CHECK(reset("Claude AI usage limit reached|1795831800") ==
        2 * hour + 41 * minute);
}

TEST_CASE("quota reset: a time of day is its next occurrence in its zone") {
  CHECK(reset("resets at 3pm") == 15 * hour + 31 * minute); // UTC
  CHECK(reset("resets 3:30pm UTC") == 16 * hour + 1 * minute);
  CHECK(reset("resets 15:00 GMT") == 15 * hour + 31 * minute);
  // 23:00 has passed today: tomorrow's.
  CHECK(reset("resets 11pm") == 23 * hour + 31 * minute);
  CHECK(reset("resets 23:29") == 24 * hour); // exactly now: tomorrow
  // 3pm New York (UTC-5) is 20:00 UTC on the 28th.
  CHECK(reset("resets 3pm (America/New_York)") == 20 * hour + 31 * minute);
  // Sydney is already on the 28th (10:29 local): 3pm there is 04:00 UTC.
  CHECK(reset("resets 3pm (Australia/Sydney)") == 4 * hour + 31 * minute);
  CHECK(reset("resets 3pm +02:00") == 13 * hour + 31 * minute);
  CHECK(reset("resets 3pm UTC-5") == 20 * hour + 31 * minute);
}

TEST_CASE("quota reset: daylight saving time in the zone's rules") {
  // 2040 is past the transitions listed in the zone files: the files'
  // POSIX rule applies. 2040-07-01T00:00Z: Berlin is on summer time.
  auto july_2040 = at_unix(2224713600);
  CHECK(reset("resets 3pm (Europe/Berlin)", july_2040) == 13 * hour);
  CHECK(reset("resets 3pm (America/New_York)", july_2040) == 19 * hour);
  auto january_2041 = at_unix(2240611200);
  CHECK(reset("resets 3pm (Europe/Berlin)", january_2041) == 14 * hour);
  CHECK(reset("resets 3pm (Australia/Sydney)", january_2041) == 4 * hour);
}

TEST_CASE("quota reset: dates, timestamps and durations") {
  CHECK(reset("resets at 2026-11-28T02:10:00Z") == 2 * hour + 41 * minute);
  CHECK(reset("resets at 2026-11-28T02:10:00+01:00") == 1 * hour + 41 * minute);
  CHECK(reset("resets_at: 2026-11-28T02:10:00.123Z") == 2 * hour + 41 * minute);
  CHECK(reset("resets Sat, 28 Nov 2026 02:10 UTC") == 2 * hour + 41 * minute);
  CHECK(reset("try again in 2 days 3 hours") == 51 * hour);
  CHECK(reset("limit resets in 4h 12m") == 4 * hour + 12 * minute);
  CHECK(reset("resets in 2h13m") == 2 * hour + 13 * minute);
  CHECK(reset("try again in 90 minutes") == 90 * minute);
}

TEST_CASE("quota reset: beyond a week is capped, not ignored") {
  CHECK(reset("resets in 30 days") == max_quota_reset_s);
  CHECK(reset("resets on Dec 25") == max_quota_reset_s);
  CHECK(reset(R"("resets_in_seconds": 99999999)") == max_quota_reset_s);
  // A date without a year that has passed is next year's: capped too.
  CHECK(reset("resets Jul 4 3pm (Europe/Berlin)") == max_quota_reset_s);
}

TEST_CASE("quota reset: garbage and the past are refused") {
  for (const char* line : {
         "resets 3pm (Mars/Olympus)",      // no such zone
         "resets 25:00",                   // no such hour
         "resets at 13pm",                 // no such hour
         "resets 3 times",                 // not a time
         "preset 3pm",                     // not the word "reset"
         "resets at Jan 1, 2020 3:00 PM",  // in the past
         "resets_at: 1000000000",          // in the past
         "resets on Feb 30",               // no such day
         R"("resets_in_seconds": -5)",     // negative
         R"("resets_in_seconds": "soon")", // not a number
         "resets at 2026-13-01T00:00:00Z", // no such month
         "usage limit reached|123",        // not a Unix time
         "you hit your limit",             // no reset at all
         "",
       }) {
    INFO(line);
    CHECK_FALSE(reset(line));
  }
  // A zone name that is not one cannot reach outside the zone database;
  // the time is then read without a zone (UTC).
  CHECK(reset("resets 3pm (../../../etc/passwd)") == 15 * hour + 31 * minute);
}

TEST_CASE("quota reset: any bytes, bounded work") {
  // A line of nothing but triggers: at most 16 are read, each within a
  // bounded window, so this returns at once.
  std::string many;
  for (int i = 0; i < 20000; ++i)
    many += "resets 3pm (Nowhere/Zone" + std::to_string(i) + ") ";
  CHECK_FALSE(reset(many));
  std::string binary(4096, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i)
    binary[i] = static_cast<char>(i * 37);
  CHECK_FALSE(reset(binary));
  // The first valid reset in the line wins, after a refused one.
  CHECK(reset("resets 25:00, no: resets in 2h") == 2 * hour);
}

TEST_CASE("classifier: a usage limit is quota_exhausted with its reset") {
  auto c =
    classify({"You've hit your 5-hour limit · resets 3:10am (Europe/Berlin)"});
  CHECK(c.cls == error_class::quota_exhausted);
  CHECK(c.rule == "quota");
  CHECK(c.retry_after_s == 2 * hour + 41 * minute);
  // The reset may be on another line of the window than the match.
  c = classify({"[API Error: 429 The usage limit has been reached]",
                R"({"resets_in_seconds": 600})"},
               "qwen");
  CHECK(c.cls == error_class::quota_exhausted);
  CHECK(c.retry_after_s == 600);
  // No reset in the output: quota_exhausted, and the policy's default.
  c = classify({"TerminalQuotaError: You have exhausted your daily quota on "
                "this model."},
               "gemini");
  CHECK(c.cls == error_class::quota_exhausted);
  CHECK_FALSE(c.retry_after_s);
}

TEST_CASE("classifier: a quota is told apart from a rate limit and billing") {
  // Per-minute limits come back soon: rate_limit.
  CHECK(classify({"Rate limit reached for gpt-5 on requests per min (RPM): "
                  "Please try again in 7s."})
          .cls == error_class::rate_limit);
  // Out of credit: billing, whatever resets.
  auto c = classify({"Your credit balance is too low to access the Anthropic "
                     "API."});
  CHECK(c.rule == "billing");
  c = classify({"You've hit your monthly spend limit. See Usage in Settings"});
  CHECK(c.rule == "billing");
  // Gemini's daily quota text also says "plan and billing": still a quota.
  c = classify({"You have exhausted your daily quota on this model.",
                "message: 'You exceeded your current quota, please check your "
                "plan and billing details."},
               "gemini");
  CHECK(c.cls == error_class::quota_exhausted);
  // A rate limit's hint is not read as a quota reset, nor the reverse.
  c = classify({"429 Too Many Requests", "resets in 2h"});
  CHECK(c.cls == error_class::rate_limit);
  CHECK_FALSE(c.retry_after_s);
}

TEST_CASE("classifier: an agent waiting for a person is needs_input") {
  for (const char* line : {
         "EOFError: EOF when reading a line",
         "Error: User force closed the prompt with 0 null",
         "Continue? [y/N] ",
         "Do you want to proceed?",
         "The command requires approval",
         "waiting for approval to run `rm -rf build`",
         "Manual authorization is required but the current session is "
         "non-interactive. Please run the Gemini CLI in an interactive "
         "terminal to log in, provide a GEMINI_API_KEY, or ensure "
         "Application Default Credentials are configured.",
       }) {
    INFO(line);
    auto c = classify({"working...", line});
    CHECK(c.cls == error_class::needs_input);
    CHECK(c.rule == "needs_input");
  }
  // A missing key is fatal: nobody needs to answer, somebody must
  // configure.
  for (const char* line : {
         "Not logged in · Please run /login",
         "ERROR: Missing environment variable: `OPENAI_API_KEY`.",
         "When using Gemini API, you must specify the GEMINI_API_KEY "
         "environment variable.",
         "Please set an Auth method in your /home/u/.gemini/settings.json or "
         "specify one of the following environment variables before running: "
         "GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA",
         "No auth type is selected. Please configure an auth type (e.g. via "
         "settings or `--auth-type`) before running in non-interactive mode.",
       }) {
    INFO(line);
    CHECK(classify({line}).cls == error_class::fatal);
  }
}

TEST_CASE("classify_attempt: a structured usage limit is quota_exhausted") {
  auto rules = *classifier::make(default_classifier_rules());
  // codex-style: OpenAI's code in the error type.
  structured_error e;
  e.type = "usage_limit_exceeded";
  e.message = "You've hit your usage limit. Try again in 4h 12m.";
  auto c = classify_structured(e, now);
  REQUIRE(c);
  CHECK(c->cls == error_class::quota_exhausted);
  CHECK(c->rule == "structured:usage_limit_exceeded");
  CHECK(c->retry_after_s == 4 * hour + 12 * minute);

  // claude's stream-json: the CLI says "rate_limit", its rate_limit_info
  // says a 5-hour subscription limit.
  output_parser p{output_format::claude_stream_json};
  const std::string info =
    R"j("api_error_params":{"rate_limit_info":{"status":"rejected",)j"
    R"j("resetsAt":1795831800,"rateLimitType":"five_hour"}})j";
  const std::string text =
    "You've hit your 5-hour limit · resets 3:10am (Europe/Berlin)";
  p.feed(R"j({"type":"assistant","message":{"content":[{"type":"text",)j"
         R"j("text":")j" +
         text + R"j("}]},"error":"rate_limit","api_error_status":429,)j" +
         info + R"j(,"api_error_type":"rate_limit_error"})j");
  p.feed(R"j({"type":"result","is_error":true,"api_error_status":429,)j"
         R"j("api_error_type":"rate_limit_error",)j" +
         info + R"j(,"result":")j" + text + R"j("})j");
  attempt_outcome out = failed({});
  out.structured = p.result();
  c = classify_attempt(rules, out, "claude", now);
  CHECK(c->cls == error_class::quota_exhausted);
  CHECK(c->rule == "structured:usage_limit_reached");
  CHECK(c->retry_after_s == 2 * hour + 41 * minute);

  // "overage" is usage credits: not a quota, the text rules decide.
  output_parser credits{output_format::claude_stream_json};
  credits.feed(R"j({"type":"result","is_error":true,"api_error_status":429,)j"
               R"j("api_error_type":"rate_limit_error","api_error_params":)j"
               R"j({"rate_limit_info":{"status":"rejected",)j"
               R"j("rateLimitType":"overage"}},"result":"x"})j");
  REQUIRE(credits.result().error);
  CHECK(credits.result().error->type == "rate_limit_error");
}

#include "tasksup/supervisor/classifier.hpp"

#include "classifier_reference.hpp"
#include "tasksup/supervisor/config.hpp"

#include <boost/json.hpp>

#include <catch2/catch.hpp>

#include <signal.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace tasksup;
using namespace std::string_literals;

namespace {

classifier make_classifier(std::vector<classifier_rule> rules) {
  auto result = classifier::make(std::move(rules));
  if (!result)
    FAIL("classifier::make failed: " << result.error().to_string());
  return std::move(result).value();
}

classifier defaults() {
  return make_classifier(default_classifier_rules());
}

attempt_outcome failed(int exit_code, std::vector<std::string> tail = {}) {
  attempt_outcome out;
  out.exit_code = exit_code;
  out.tail = std::move(tail);
  return out;
}

/// `n` harmless lines of agent chatter.
std::vector<std::string> chatter(std::size_t n) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < n; ++i)
    lines.push_back("step " + std::to_string(i) + ": editing src/main.cpp");
  return lines;
}

/// `line` followed by `after` lines of chatter: `line` is then line
/// `after + 1` counted from the end.
std::vector<std::string> at_from_end(std::string line, std::size_t after) {
  std::vector<std::string> lines{std::move(line)};
  auto rest = chatter(after);
  lines.insert(lines.end(), rest.begin(), rest.end());
  return lines;
}

classification classify(const attempt_outcome& out,
                        std::string_view agent_cli = "codex") {
  static const classifier cls = defaults();
  return cls.classify(out, agent_cli, {});
}

} // namespace

TEST_CASE(
  "default rules: the documented classes, refined by what real CLIs print",
  "[classifier]") {
  auto rules = default_classifier_rules();
  std::vector<std::pair<std::string, error_class>> want{
    {"container_crash", error_class::container_crash},
    {"quota", error_class::quota_exhausted},
    {"rate_limit_per_minute", error_class::rate_limit},
    {"billing", error_class::agent_failure},
    {"rate_limit", error_class::rate_limit},
    {"needs_input", error_class::needs_input},
    {"fatal", error_class::fatal},
    {"agent_failure", error_class::agent_failure},
    {"transient", error_class::retryable},
  };
  REQUIRE(rules.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(rules[i].id == want[i].first);
    CHECK(rules[i].cls == want[i].second);
  }
  CHECK(rules[1].window_lines == 100);
  CHECK(rules[4].window_lines == 100);
  CHECK(rules[5].window_lines == 20);
  CHECK(rules[6].window_lines == 50);
  CHECK(rules[7].window_lines == 50);
  for (const auto& rule : rules)
    CHECK_FALSE(rule.match_all);
  CHECK(defaults().rules().size() == want.size());
}

TEST_CASE("container crashes: OOM, exit 137 and crash signals",
          "[classifier]") {
  SECTION("OOM-killed") {
    auto out = failed(1, chatter(3));
    out.oom_killed = true;
    auto c = classify(out);
    CHECK(c.cls == error_class::container_crash);
    CHECK(c.rule == "container_crash");
    CHECK(c.line.empty());
    CHECK_FALSE(c.retry_after_s);
  }
  SECTION("OOM-killed even with exit code 0") {
    auto out = failed(0);
    out.oom_killed = true;
    CHECK(classify(out).cls == error_class::container_crash);
  }
  SECTION("exit 137 without a signal, as docker reports SIGKILL") {
    auto c = classify(failed(137, chatter(2)));
    CHECK(c.cls == error_class::container_crash);
    CHECK(c.line.empty());
  }
  SECTION("each crash signal") {
    for (int sig : {SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGKILL, SIGSEGV}) {
      auto out = failed(128 + sig);
      out.signal = sig;
      INFO("signal " << sig);
      CHECK(classify(out).cls == error_class::container_crash);
    }
  }
  SECTION("SIGTERM and SIGINT are not crashes") {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      auto out = failed(128 + sig);
      out.signal = sig;
      INFO("signal " << sig);
      auto c = classify(out);
      CHECK(c.cls == error_class::retryable);
      CHECK(c.rule == "default");
    }
  }
}

TEST_CASE("rate limits are recognised by each default pattern",
          "[classifier]") {
  for (std::string line :
       {"Error: rate limit reached for gpt-4", "RateLimitError: slow down",
        "rate-limit exceeded", "HTTP 429", "status=429,", "429 Too Many",
        "got 429.", "Too Many Requests", "too_many_requests",
        "Quota exceeded for metric", "QuotaExceeded"}) {
    INFO(line);
    auto tail = chatter(5);
    tail.insert(tail.begin() + 2, line);
    auto c = classify(failed(1, tail));
    CHECK(c.cls == error_class::rate_limit);
    CHECK(c.rule == "rate_limit");
    CHECK(c.line == line);
  }
}

TEST_CASE("429 counts only as a whole number", "[classifier]") {
  for (std::string line : {"took 4290 ms", "job 14291 done", "port 4291",
                           "id 1429", "request 3f429e1c failed", "v0.4.29"}) {
    INFO(line);
    auto c = classify(failed(1, {line}));
    CHECK(c.cls == error_class::retryable);
  }
  CHECK(classify(failed(1, {"HTTP/1.1 429"})).cls == error_class::rate_limit);
  CHECK(classify(failed(1, {"(429)"})).cls == error_class::rate_limit);
}

TEST_CASE("fatal errors are recognised by each default pattern",
          "[classifier]") {
  for (std::string line :
       {"Authentication failed for user", "authentication_failed",
        "Error: Invalid API key provided", "INVALID_API_KEY", "invalid-api-key",
        "open /root/.codex: Permission denied"}) {
    INFO(line);
    auto c = classify(failed(1, {"starting", line, "bye"}));
    CHECK(c.cls == error_class::fatal);
    CHECK(c.rule == "fatal");
    CHECK(c.line == line);
  }
}

TEST_CASE("agent failures: exit 126/127, command not found, missing agent",
          "[classifier]") {
  SECTION("exit codes") {
    for (int code : {126, 127}) {
      auto c = classify(failed(code, chatter(2)));
      CHECK(c.cls == error_class::agent_failure);
      CHECK(c.rule == "agent_failure");
      CHECK(c.line.empty());
    }
  }
  SECTION("command not found") {
    auto c = classify(failed(1, {"sh: 1: codex: Command not found"}));
    CHECK(c.cls == error_class::agent_failure);
    CHECK(c.line == "sh: 1: codex: Command not found");
  }
  SECTION("no such file naming the agent's basename") {
    std::string line = "exec: No such file or directory: /opt/bin/codex";
    auto c = classify(failed(1, {line}), "/usr/local/bin/codex");
    CHECK(c.cls == error_class::agent_failure);
    CHECK(c.line == line);
  }
  SECTION("no such file naming another binary is not an agent failure") {
    auto c = classify(failed(1, {"No such file or directory: /usr/bin/git"}),
                      "/usr/local/bin/codex");
    CHECK(c.cls == error_class::retryable);
  }
  SECTION("the agent name is matched literally, not as a pattern") {
    CHECK(classify(failed(1, {"no such file: myXagent"}), "my.agent").cls ==
          error_class::retryable);
    CHECK(classify(failed(1, {"no such file: my.agent"}), "my.agent").cls ==
          error_class::agent_failure);
    CHECK(classify(failed(1, {"no such file: c++(x)"}), "/bin/c++(x)").cls ==
          error_class::agent_failure);
  }
  SECTION("with no agent_cli the no-such-file pattern cannot match") {
    CHECK(classify(failed(1, {"no such file or directory"}), "").cls ==
          error_class::retryable);
    CHECK(classify(failed(1, {"no such file: codex"}), "").cls ==
          error_class::retryable);
    // The other criteria of the rule still work.
    CHECK(classify(failed(1, {"command not found"}), "").cls ==
          error_class::agent_failure);
  }
}

TEST_CASE("anything else non-zero is retryable by the default rule",
          "[classifier]") {
  auto c = classify(failed(2, chatter(10)));
  CHECK(c.cls == error_class::retryable);
  CHECK(c.rule == "default");
  CHECK(c.line.empty());
  CHECK_FALSE(c.retry_after_s);
  CHECK(classify(failed(1)).cls == error_class::retryable);
}

TEST_CASE("rules apply in priority order", "[classifier]") {
  SECTION("OOM beats rate-limit text") {
    auto out = failed(1, {"429 Too Many Requests"});
    out.oom_killed = true;
    CHECK(classify(out).cls == error_class::container_crash);
  }
  SECTION("exit 137 beats fatal text") {
    CHECK(classify(failed(137, {"permission denied"})).cls ==
          error_class::container_crash);
  }
  SECTION("rate limit beats fatal text") {
    auto c =
      classify(failed(1, {"rate limit exceeded", "authentication failed"}));
    CHECK(c.cls == error_class::rate_limit);
    CHECK(c.line == "rate limit exceeded");
  }
  SECTION("rate limit beats exit 127") {
    CHECK(classify(failed(127, {"429"})).cls == error_class::rate_limit);
  }
  SECTION("fatal beats exit 127 and command not found") {
    CHECK(classify(failed(127, {"invalid api key"})).cls == error_class::fatal);
    CHECK(classify(failed(1, {"command not found", "permission denied"})).cls ==
          error_class::fatal);
  }
}

TEST_CASE("pattern windows end exactly at their line counts", "[classifier]") {
  SECTION("rate_limit sees the last 100 lines") {
    CHECK(classify(failed(1, at_from_end("rate limit", 99))).cls ==
          error_class::rate_limit);
    CHECK(classify(failed(1, at_from_end("rate limit", 100))).cls ==
          error_class::retryable);
  }
  SECTION("fatal sees the last 50 lines") {
    CHECK(classify(failed(1, at_from_end("permission denied", 49))).cls ==
          error_class::fatal);
    CHECK(classify(failed(1, at_from_end("permission denied", 50))).cls ==
          error_class::retryable);
  }
  SECTION("agent_failure sees the last 50 lines") {
    CHECK(
      classify(failed(1, at_from_end("codex: command not found", 49))).cls ==
      error_class::agent_failure);
    CHECK(
      classify(failed(1, at_from_end("codex: command not found", 50))).cls ==
      error_class::retryable);
    CHECK(classify(failed(1, at_from_end("no such file: codex", 49))).cls ==
          error_class::agent_failure);
    CHECK(classify(failed(1, at_from_end("no such file: codex", 50))).cls ==
          error_class::retryable);
  }
  SECTION("fatal text only rate_limit's window reaches is unseen") {
    CHECK(classify(failed(1, at_from_end("permission denied", 75))).cls ==
          error_class::retryable);
  }
}

TEST_CASE("the newest matching line is reported", "[classifier]") {
  auto c = classify(
    failed(1, {"rate limit (first)", "ok", "429 (second)", "still ok"}));
  CHECK(c.cls == error_class::rate_limit);
  CHECK(c.line == "429 (second)");
}

TEST_CASE("matching is case-insensitive", "[classifier]") {
  CHECK(classify(failed(1, {"RATE LIMIT"})).cls == error_class::rate_limit);
  CHECK(classify(failed(1, {"tOo MaNy ReQuEsTs"})).cls ==
        error_class::rate_limit);
  CHECK(classify(failed(1, {"PERMISSION DENIED"})).cls == error_class::fatal);
  CHECK(classify(failed(1, {"No Such File: CODEX"}), "codex").cls ==
        error_class::agent_failure);
}

TEST_CASE("infrastructure errors bypass the rules", "[classifier]") {
  auto out = failed(137, {"rate limit"});
  out.oom_killed = true;
  out.infrastructure_error = "docker: cannot connect to /var/run/docker.sock";
  auto c = classify(out);
  CHECK(c.cls == error_class::infrastructure);
  CHECK(c.rule == "infrastructure");
  CHECK(c.line == out.infrastructure_error);
  CHECK_FALSE(c.retry_after_s);
}

TEST_CASE("custom rules: exit codes, signals, OOM flag and window 0",
          "[classifier]") {
  classifier_rule by_exit;
  by_exit.id = "lint_failed";
  by_exit.cls = error_class::fatal;
  by_exit.exit_codes = {3, 4};
  classifier_rule by_signal;
  by_signal.id = "terminated";
  by_signal.cls = error_class::container_crash;
  by_signal.signals = {SIGTERM};
  classifier_rule anywhere;
  anywhere.id = "disk_full";
  anywhere.cls = error_class::infrastructure;
  anywhere.patterns = {"no space left on device"};
  anywhere.window_lines = 0;
  auto cls = make_classifier({by_exit, by_signal, anywhere});

  auto c = cls.classify(failed(4), "codex", {});
  CHECK(c.cls == error_class::fatal);
  CHECK(c.rule == "lint_failed");
  CHECK(cls.classify(failed(5), "codex", {}).rule == "default");

  auto term = failed(143);
  term.signal = SIGTERM;
  CHECK(cls.classify(term, "codex", {}).rule == "terminated");
  // The signal criterion looks at the signal, not at 128+N.
  CHECK(cls.classify(failed(143), "codex", {}).rule == "default");

  auto far = at_from_end("write: No space left on device", 5000);
  c = cls.classify(failed(1, far), "codex", {});
  CHECK(c.rule == "disk_full");
  CHECK(c.line == "write: No space left on device");
  // The custom set replaces the defaults entirely.
  CHECK(cls.classify(failed(1, {"rate limit"}), "codex", {}).rule == "default");
}

TEST_CASE("custom rules: match_all needs every criterion it sets",
          "[classifier]") {
  classifier_rule rule;
  rule.id = "segv_in_agent";
  rule.cls = error_class::agent_failure;
  rule.exit_codes = {1};
  rule.patterns = {"segmentation fault", "core dumped"};
  rule.match_all = true;
  classifier_rule killed;
  killed.id = "killed_not_oom";
  killed.cls = error_class::retryable;
  killed.exit_codes = {137};
  killed.oom_killed = false;
  killed.match_all = true;
  auto cls = make_classifier({rule, killed});

  auto c = cls.classify(failed(1, {"x", "Segmentation fault (core dumped)"}),
                        "codex", {});
  CHECK(c.rule == "segv_in_agent");
  CHECK(c.line == "Segmentation fault (core dumped)");
  CHECK(cls.classify(failed(2, {"Segmentation fault"}), "codex", {}).rule ==
        "default");
  CHECK(cls.classify(failed(1, {"all fine"}), "codex", {}).rule == "default");

  CHECK(cls.classify(failed(137), "codex", {}).rule == "killed_not_oom");
  auto oom = failed(137);
  oom.oom_killed = true;
  CHECK(cls.classify(oom, "codex", {}).rule == "default");

  SECTION("without match_all any one criterion is enough") {
    rule.match_all = false;
    auto any = make_classifier({rule});
    CHECK(any.classify(failed(2, {"core dumped"}), "codex", {}).rule ==
          "segv_in_agent");
    auto by_code = any.classify(failed(1, {"all fine"}), "codex", {});
    CHECK(by_code.rule == "segv_in_agent");
    CHECK(by_code.line.empty());
  }
}

TEST_CASE("custom rate-limit rules get retry-after hints too", "[classifier]") {
  classifier_rule rule;
  rule.id = "throttled";
  rule.cls = error_class::rate_limit;
  rule.exit_codes = {75};
  rule.window_lines = 3;
  auto cls = make_classifier({rule});
  auto c = cls.classify(failed(75, {"retry after 9s", "a", "b", "c"}), "x", {});
  CHECK(c.rule == "throttled");
  CHECK_FALSE(c.retry_after_s); // outside the rule's window of 3
  c = cls.classify(failed(75, {"retry after 9s", "a", "b"}), "x", {});
  REQUIRE(c.retry_after_s);
  CHECK(*c.retry_after_s == Approx(9));
}

TEST_CASE("bad rules are rejected naming the rule and the problem",
          "[classifier]") {
  auto rules = default_classifier_rules();
  SECTION("invalid pattern") {
    auto& fatal = rules[6];
    REQUIRE(fatal.id == "fatal");
    fatal.patterns.push_back("permission(denied");
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path ==
          "/6/patterns/" + std::to_string(fatal.patterns.size() - 1));
    auto text = result.error().to_string();
    CHECK_THAT(text, Catch::Contains("rule 'fatal'"));
    CHECK_THAT(text, Catch::Contains("permission(denied"));
    CHECK_THAT(text, Catch::Contains("missing )"));
  }
  SECTION("invalid templated pattern") {
    auto& agent = rules[7];
    REQUIRE(agent.id == "agent_failure");
    agent.patterns.push_back("{agent_cli}[");
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path ==
          "/7/patterns/" + std::to_string(agent.patterns.size() - 1));
    CHECK_THAT(result.error().what, Catch::Contains("agent_failure"));
  }
  SECTION("a pattern cannot break out of its alternation branch") {
    // Valid only if glued to a neighbour; must fail on its own.
    rules[1].patterns.push_back("a)|(b");
    REQUIRE_FALSE(classifier::make(rules));
  }
  SECTION("empty pattern") {
    rules[0].patterns.push_back("");
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path == "/0/patterns/0");
  }
  SECTION("empty id") {
    rules[1].id.clear();
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path == "/1/id");
  }
  SECTION("duplicate id") {
    rules[7].id = "transient";
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path == "/8/id");
    CHECK_THAT(result.error().what, Catch::Contains("duplicate"));
  }
  SECTION("rule without criteria") {
    classifier_rule empty;
    empty.id = "nothing";
    rules.push_back(empty);
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path == "/" + std::to_string(rules.size() - 1));
  }
  SECTION("pattern over the memory bound") {
    std::string huge;
    for (int i = 0; i < 200; ++i)
      huge += "\\w{1000}";
    rules[1].patterns.push_back(huge);
    auto result = classifier::make(rules);
    REQUIRE_FALSE(result);
    CHECK(result.error().path ==
          "/1/patterns/" + std::to_string(rules[1].patterns.size() - 1));
    CHECK_THAT(result.error().what, Catch::Contains("too large"));
  }
}

TEST_CASE("binary output and invalid UTF-8 are matched bytewise",
          "[classifier]") {
  auto line = "\xff\xfe\x00 RATE LIMIT \xc3(\x80\x00"s;
  auto c = classify(failed(1, {"\x00\x01\x02"s, line}));
  CHECK(c.cls == error_class::rate_limit);
  CHECK(c.line == line);

  CHECK(classify(failed(1, {"\x00"
                            "429\x00"s}))
          .cls == error_class::rate_limit);

  // Random bytes with no letters or digits cannot match any default pattern.
  std::mt19937 gen{42};
  std::uniform_int_distribution<int> byte{0, 255};
  auto noise_line = [&] {
    std::string l;
    while (l.size() < 300) {
      auto b = static_cast<char>(byte(gen));
      if (!std::isalnum(static_cast<unsigned char>(b)))
        l.push_back(b);
    }
    return l;
  };
  std::vector<std::string> noise;
  for (int i = 0; i < 200; ++i)
    noise.push_back(noise_line());
  CHECK(classify(failed(1, noise)).cls == error_class::retryable);
  auto marked = noise_line() + "429" + noise_line();
  noise[150] = marked;
  c = classify(failed(1, noise));
  CHECK(c.cls == error_class::rate_limit);
  CHECK(c.line == marked);
}

TEST_CASE("megabyte lines are matched and shown around the match",
          "[classifier]") {
  std::string big(1 << 20, 'x');
  big.replace(600000, 17, " quota exceeded! ");
  auto c = classify(failed(1, {"before", big}));
  CHECK(c.cls == error_class::rate_limit);
  CHECK(c.line.size() <= max_display_line_bytes + 6);
  CHECK_THAT(c.line, Catch::Contains("quota exceeded"));
  CHECK_THAT(c.line, Catch::StartsWith("..."));
  CHECK_THAT(c.line, Catch::EndsWith("..."));

  std::string tail_match(1 << 20, 'y');
  tail_match += " permission denied";
  c = classify(failed(1, {tail_match}));
  CHECK(c.cls == error_class::fatal);
  CHECK_THAT(c.line, Catch::EndsWith("permission denied"));
  CHECK(c.line.size() <= max_display_line_bytes + 6);

  // No match in a megabyte of a pattern-unfriendly prefix.
  CHECK(classify(failed(1, {std::string(1 << 20, 'r')})).cls ==
        error_class::retryable);
}

TEST_CASE("patterns that backtrack exponentially elsewhere run linearly",
          "[classifier]") {
  classifier_rule rule;
  rule.id = "evil";
  rule.cls = error_class::fatal;
  rule.patterns = {"^(a+)+$", "(x+x+)+y"};
  rule.window_lines = 0;
  auto cls = make_classifier({rule});
  std::string as(100000, 'a');
  as += '!';
  std::string xs(100000, 'x');
  CHECK(cls.classify(failed(1, {as, xs}), "x", {}).rule == "default");
  CHECK(cls.classify(failed(1, {xs + "y"}), "x", {}).rule == "evil");
}

TEST_CASE("classifier copies and moves share the rules, usable from threads",
          "[classifier]") {
  auto original = defaults();
  classifier moved{std::move(original)};
  // A moved-from classifier stays usable.
  CHECK(original.classify(failed(127), "codex", {}).cls ==
        error_class::agent_failure);
  classifier copy = moved;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto agent = "agent" + std::to_string(t);
      for (int i = 0; i < 200; ++i) {
        auto mine =
          copy.classify(failed(1, {"no such file: " + agent}), agent, {});
        auto other =
          copy.classify(failed(1, {"no such file: agentX"}), agent, {});
        if (mine.cls != error_class::agent_failure ||
            other.cls != error_class::retryable)
          ++wrong[t];
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("agent-specific patterns stay right for many agent names",
          "[classifier]") {
  // More names than the classifier keeps compiled at once, then the first
  // ones again: each name only ever matches its own "no such file" line.
  auto cls = defaults();
  int wrong = 0;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 600; ++i) {
      auto agent = "agent" + std::to_string(i);
      auto next = "agent" + std::to_string(i + 1);
      if (cls.classify(failed(1, {"no such file: " + agent}), agent, {}).cls !=
            error_class::agent_failure ||
          cls.classify(failed(1, {"no such file: " + next}), agent, {}).cls !=
            error_class::retryable)
        ++wrong;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("agent names longer than a file name classify right every time",
          "[classifier]") {
  // Such names are compiled for the call and not kept; each still matches
  // only its own "no such file" line, also after kept names come and go.
  auto cls = defaults();
  int wrong = 0;
  for (int i = 0; i < 80; ++i) {
    auto agent = std::to_string(i) + std::string(300 + i % 3, 'a');
    auto next = std::to_string(i + 1) + std::string(300 + i % 3, 'a');
    if (cls.classify(failed(1, {"no such file: " + agent}), agent, {}).cls !=
          error_class::agent_failure ||
        cls.classify(failed(1, {"no such file: " + next}), agent, {}).cls !=
          error_class::retryable ||
        cls.classify(failed(1, {"no such file: codex"}), "codex", {}).cls !=
          error_class::agent_failure)
      ++wrong;
  }
  CHECK(wrong == 0);
}

TEST_CASE("rules whose DFA outgrows the memory budget still classify right",
          "[classifier]") {
  // `a[ab]{16}c` has ~2^17 DFA states, so random a/b/c output fills any
  // regex memory budget many times over; RE2 then discards its cache or
  // falls back to its NFA. The class, the newest matching line and where
  // the match is must stay what a plain scan of the line says.
  classifier_rule rule;
  rule.id = "blowup";
  rule.cls = error_class::fatal;
  rule.patterns = {"a[ab]{16}c"};
  rule.window_lines = 0;
  auto cls = make_classifier({rule});
  // Start of the leftmost match in `line`, or npos.
  auto oracle = [](const std::string& line) {
    for (std::size_t i = 0; i + 17 < line.size(); ++i) {
      bool ok = line[i] == 'a' && line[i + 17] == 'c';
      for (std::size_t j = i + 1; ok && j <= i + 16; ++j)
        ok = line[j] == 'a' || line[j] == 'b';
      if (ok)
        return i;
    }
    return std::string::npos;
  };
  std::mt19937_64 rng{20261123};
  int matched = 0;
  for (int round = 0; round < 60; ++round) {
    std::vector<std::string> tail;
    for (int k = 0; k < 20; ++k) {
      std::string line;
      // 'c's in one line of ten, so most lines do not match and are
      // scanned to the end, and some tails have no match at all.
      bool with_c = rng() % 10 == 0;
      for (int b = 0; b < 3000; ++b)
        line += with_c && rng() % 500 == 0 ? 'c' : "ab"[rng() % 2];
      tail.push_back(std::move(line));
    }
    auto newest = tail.size();
    for (auto k = tail.size(); k > 0 && newest == tail.size(); --k)
      if (oracle(tail[k - 1]) != std::string::npos)
        newest = k - 1;
    auto c = cls.classify(failed(1, tail), "x", {});
    if (newest == tail.size()) {
      CHECK(c.rule == "default");
      continue;
    }
    ++matched;
    REQUIRE(c.rule == "blowup");
    const auto& line = tail[newest];
    // A 3000-byte line is shown as 1000 bytes around the match's start.
    CHECK(c.line.find(line.substr(oracle(line), 18)) != std::string::npos);
    CHECK(line.find(c.line.substr(3, 900)) != std::string::npos);
  }
  CHECK(matched > 10);
  CHECK(matched < 60);
}

TEST_CASE("a rule of many kilobytes of patterns still compiles",
          "[classifier]") {
  // The memory budget bounds a rule's program too: tens of kilobytes of
  // pattern text are fine, hundreds are refused (see "bad rules").
  classifier_rule rule;
  rule.id = "long";
  rule.cls = error_class::fatal;
  for (int i = 0; i < 2000; ++i)
    rule.patterns.push_back("error code e" + std::to_string(100000 + i) +
                            "\\b");
  auto cls = make_classifier({rule});
  CHECK(cls.classify(failed(1, {"fatal: error code E101999"}), "x", {}).rule ==
        "long");
  CHECK(cls.classify(failed(1, {"fatal: error code E102000"}), "x", {}).rule ==
        "default");
}

TEST_CASE("rate-limit classifications carry the newest retry-after hint",
          "[classifier]") {
  auto c = classify(failed(1, {"retry after 99s", "429 Too Many Requests",
                               "Retry-After: 30", "exiting"}));
  CHECK(c.cls == error_class::rate_limit);
  REQUIRE(c.retry_after_s);
  CHECK(*c.retry_after_s == Approx(30));

  // A hint outside the rate_limit window (101st line from the end) is unseen.
  auto tail = at_from_end("retry after 12s", 100);
  tail.back() = "rate limit";
  c = classify(failed(1, tail));
  CHECK(c.cls == error_class::rate_limit);
  CHECK_FALSE(c.retry_after_s);

  // Other classes never carry one.
  c = classify(failed(1, {"permission denied", "retry after 5s"}));
  CHECK(c.cls == error_class::fatal);
  CHECK_FALSE(c.retry_after_s);
  c = classify(failed(1, {"retry after 5s"}));
  CHECK(c.cls == error_class::retryable);
  CHECK_FALSE(c.retry_after_s);
}

TEST_CASE("parse_retry_after understands the usual hint forms",
          "[classifier][retry_after]") {
  struct example {
    const char* line;
    double seconds;
  };
  const example examples[] = {
    {"Retry-After: 30", 30},
    {"retry-after: 30", 30},
    {"< retry-after: 7\r", 7},
    {"Rate limited, retry after 20s", 20},
    {"Please retry in 20 seconds.", 20},
    {"Please try again in 1m30s.", 90},
    {"try again in 2 minutes", 120},
    {"retry in 500ms", 0.5},
    {"Please try again in 1.5s", 1.5},
    {"retry after 1h", 3600},
    {"Please try again in 1m0.6s.", 60.6},
    {"retry after 1 minute and 30 seconds", 90},
    {"retry after 2 min 5 sec", 125},
    {R"({"retryDelay": "38s"})", 38},
    {"retry_after=12", 12},
    {"Retry-After-Ms: 250", 0.25},
    {R"({"retry_after_ms": 1500})", 1.5},
    {"Try again after 3 hours", 10800},
    {"RETRY AFTER 45 SECS", 45},
    {"Retry-After: 0", 0},
    {"Retry-After: 86400", 86400},
    {"retry in 3 attempts; retry after 10s", 10},
    {"retry after 5s, then retry after 60s", 5},
  };
  for (const auto& ex : examples) {
    INFO(ex.line);
    auto got = parse_retry_after(ex.line);
    REQUIRE(got);
    CHECK(*got == Approx(ex.seconds));
  }
}

TEST_CASE("parse_retry_after ignores lines without a sane hint",
          "[classifier][retry_after]") {
  for (const char* line : {
         "",
         "rate limit exceeded",
         "took 1.5s",
         "retry later",
         "retrying 3 times",
         "retry in 3 attempts",
         "retry interval 5s",
         "retry after -5s",
         "retry after 25h",
         "Retry-After: 86401",
         "retry after 1700000000",
         "retry after 99999999999999999999 seconds",
         "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT",
         "retry after 2024-01-01",
         "retry after 12:30",
         "retry after 2 days",
         "retry after",
         "try again in",
       }) {
    INFO(line);
    CHECK_FALSE(parse_retry_after(line));
  }
}

TEST_CASE("parse_retry_after survives binary and huge input",
          "[classifier][retry_after]") {
  auto noisy = "\xff\x00 retry after \x01 9s\x00 Retry-After: 4\x00"s;
  auto got = parse_retry_after(noisy);
  REQUIRE(got);
  CHECK(*got == Approx(4));

  std::string huge = "retry after ";
  huge += std::string(1 << 20, '1');
  CHECK_FALSE(parse_retry_after(huge));
  std::string units = "retry in ";
  for (int i = 0; i < 100000; ++i)
    units += "1m";
  CHECK_FALSE(parse_retry_after(units)); // 100000 minutes: absurd
  std::string repeated;
  for (int i = 0; i < 100000; ++i)
    repeated += "retry-after-";
  CHECK_FALSE(parse_retry_after(repeated));
}

// --- The single-pass engine against the old one (classifier_reference.hpp):
// identical class, rule, line and retry-after on generated rule sets and
// tails and on every output fixture of the tests.

namespace {

/// Words the generated patterns and lines share, so that rules match often,
/// in mixed case, with Latin-1 and UTF-8 bytes among them.
const std::vector<std::string> corpus_words = {
  "rate",
  "limit",
  "Rate-Limit",
  "429",
  "4290",
  "too",
  "many",
  "requests",
  "quota",
  "exceeded",
  "error",
  "ERROR",
  "fatal",
  "denied",
  "codex",
  "claude",
  "no such file",
  "file",
  "oom",
  "killed",
  "retry",
  "after",
  "Retry-After: 30",
  "try again in 2m",
  "timeout",
  "panic",
  "\xe9t\xe9",
  "\xc9T\xc9",
  "caf\xc3\xa9",
  "CAF\xc3\x89",
  "\xff\xfe",
  "x",
  "_",
  "-",
  "a.b+c",
  "   ",
  "tokens",
  "model",
  "step 12",
  "exit 137",
  "\t",
};

/// Pattern pieces: literals of the words above and regex syntax whose
/// literal prefilter is not obvious (anchors, classes, word boundaries,
/// inline flags, `.*` and alternations).
const std::vector<std::string> pattern_pieces = {
  "rate.?limit",
  "\\b429\\b",
  "too.?many.?requests",
  "quota.?exceeded",
  "error",
  "^error",
  "error$",
  "(?-i)ERROR",
  "fat[a-z]l",
  "den(y|ied)",
  "no such file.*{agent_cli}",
  "{agent_cli}",
  "retry",
  "\\d{3}",
  "[0-9]+ms",
  "\xe9t\xe9",
  "\xc9t",
  "caf\xc3\xa9",
  "\\Atokens",
  "model\\z",
  "x",
  "k.*l",
  "(?:oom|killed)",
  "\\bstep\\b",
  "a\\.b\\+c",
  "\\s+-\\s",
  "[^a-z]{4}",
  "tim(e)?out|panic",
};

std::string random_line(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> count(0, 8);
  std::uniform_int_distribution<std::size_t> pick(0, corpus_words.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string line;
  if (rng() % 40 == 0)
    line.append(1500 + rng() % 800, 'z'); // longer than a display line
  for (auto n = count(rng); n > 0; --n) {
    auto word = corpus_words[pick(rng)];
    if (rng() % 3 == 0)
      for (auto& c : word)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    line += word;
    auto sep = rng() % 6;
    line += sep == 0   ? ""
            : sep == 1 ? std::string(1, static_cast<char>(byte(rng)))
                       : " ";
  }
  if (rng() % 40 == 0)
    line.append(1500 + rng() % 800, 'y');
  return line;
}

std::vector<classifier_rule> random_rules(std::mt19937_64& rng) {
  std::vector<classifier_rule> rules;
  auto n = 1 + rng() % 5;
  const error_class classes[] = {
    error_class::retryable, error_class::rate_limit, error_class::fatal,
    error_class::agent_failure, error_class::container_crash};
  const std::size_t windows[] = {0, 1, 2, 3, 10, 50, 100};
  for (std::size_t i = 0; i < n; ++i) {
    classifier_rule r;
    r.id = "r" + std::to_string(i);
    r.cls = classes[rng() % std::size(classes)];
    r.window_lines = windows[rng() % std::size(windows)];
    r.match_all = rng() % 4 == 0;
    if (rng() % 4 == 0)
      r.exit_codes = {static_cast<int>(1 + rng() % 3), 127};
    if (rng() % 6 == 0)
      r.oom_killed = rng() % 2 == 0;
    if (rng() % 6 == 0)
      r.signals = {SIGKILL, SIGSEGV};
    auto patterns = rng() % 4;
    for (std::size_t p = 0; p < patterns; ++p) {
      auto piece = pattern_pieces[rng() % pattern_pieces.size()];
      if (rng() % 4 == 0)
        piece += ".?" + pattern_pieces[rng() % pattern_pieces.size()];
      r.patterns.push_back(piece);
    }
    if (r.patterns.empty() && r.exit_codes.empty() && !r.oom_killed &&
        r.signals.empty())
      r.exit_codes = {1};
    rules.push_back(std::move(r));
  }
  return rules;
}

attempt_outcome random_outcome(std::mt19937_64& rng,
                               const std::vector<std::string>& lines) {
  attempt_outcome out;
  const int codes[] = {1, 2, 3, 126, 127, 137};
  out.exit_code = codes[rng() % std::size(codes)];
  const int signals[] = {0, 0, 0, SIGKILL, SIGSEGV, SIGTERM};
  out.signal = signals[rng() % std::size(signals)];
  out.oom_killed = rng() % 8 == 0;
  if (lines.empty()) {
    auto n = rng() % 120;
    for (std::size_t i = 0; i < n; ++i)
      out.tail.push_back(random_line(rng));
  } else {
    out.tail = lines;
  }
  return out;
}

const std::vector<std::string> agent_clis = {"", "codex", "/usr/bin/claude",
                                             "a.b+c", "CODEX"};

void check_same(const classifier& fast, reference::classifier& slow,
                const attempt_outcome& out, const std::string& agent) {
  auto got = fast.classify(out, agent, {});
  auto want = slow.classify(out, agent, {});
  INFO("agent '" << agent << "', exit " << out.exit_code << ", signal "
                 << out.signal << ", oom " << out.oom_killed << ", "
                 << out.tail.size() << " lines");
  REQUIRE(got.rule == want.rule);
  REQUIRE(got.cls == want.cls);
  REQUIRE(got.line == want.line);
  REQUIRE(got.retry_after_s == want.retry_after_s);
}

std::vector<std::string> fixture_lines(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin < text.size()) {
    auto end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

} // namespace

TEST_CASE("the single-pass engine classifies like the rule-by-rule one",
          "[classifier]") {
  std::mt19937_64 rng{20261122};
  std::size_t non_default = 0;
  for (int set = 0; set < 400; ++set) {
    auto rules = random_rules(rng);
    auto made = classifier::make(rules);
    REQUIRE(made);
    reference::classifier slow{rules};
    for (int i = 0; i < 25; ++i) {
      auto out = random_outcome(rng, {});
      const auto& agent = agent_clis[rng() % agent_clis.size()];
      check_same(*made, slow, out, agent);
      non_default += made->classify(out, agent, {}).rule != "default";
    }
  }
  // The corpus exercises the rules, not only the fall-through.
  CHECK(non_default > 4000);
}

TEST_CASE("the single-pass engine agrees on the default rules and fixtures",
          "[classifier]") {
  std::mt19937_64 rng{17};
  auto rules = default_classifier_rules();
  auto made = classifier::make(rules);
  REQUIRE(made);
  reference::classifier slow{rules};
  for (int i = 0; i < 3000; ++i) {
    auto out = random_outcome(rng, {});
    check_same(*made, slow, out, agent_clis[rng() % agent_clis.size()]);
  }
  // The shipped rule file, whatever its rules are.
  {
    std::ifstream in{TASKSUP_SOURCE_DIR "/config/classifier.json"};
    std::string text{std::istreambuf_iterator<char>{in}, {}};
    auto shipped =
      parse_classifier_rules(boost::json::parse(text), "classifier.json");
    REQUIRE(shipped);
    auto made_shipped = classifier::make(*shipped);
    REQUIRE(made_shipped);
    reference::classifier slow_shipped{*shipped};
    for (int i = 0; i < 1000; ++i)
      check_same(*made_shipped, slow_shipped, random_outcome(rng, {}),
                 agent_clis[rng() % agent_clis.size()]);
  }
  // Every output fixture of the tests and the example agents, as a tail.
  std::vector<std::filesystem::path> dirs = {
    TASKSUP_SOURCE_DIR "/tests/fixtures",
    TASKSUP_SOURCE_DIR "/tests/fuzz/corpus/classifier",
    TASKSUP_SOURCE_DIR "/config/examples/agents"};
  std::size_t files = 0;
  for (const auto& dir : dirs) {
    for (const auto& entry : std::filesystem::directory_iterator{dir}) {
      if (!entry.is_regular_file())
        continue;
      ++files;
      auto lines = fixture_lines(entry.path());
      for (int i = 0; i < 10; ++i) {
        auto out = random_outcome(rng, lines);
        for (const auto& agent : agent_clis)
          check_same(*made, slow, out, agent);
        auto custom = random_rules(rng);
        auto made_custom = classifier::make(custom);
        REQUIRE(made_custom);
        reference::classifier slow_custom{custom};
        check_same(*made_custom, slow_custom, out, "codex");
      }
    }
  }
  CHECK(files >= 20);
}

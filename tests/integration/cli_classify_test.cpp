// `tasksup classify`, run as a real process.

#include "cli_runner.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <catch2/catch.hpp>

#include <random>
#include <string>

using tasksup::test::run_tasksup;
using tasksup::test::scratch_dir;

namespace {

tasksup::test::cli_result classify(std::vector<std::string> args,
                                   const std::string& input = {}) {
  args.insert(args.begin(), "classify");
  return run_tasksup(args, input);
}

/// Runs with --json and returns the parsed object.
boost::json::object classify_json(std::vector<std::string> args,
                                  const std::string& input = {}) {
  args.push_back("--json");
  auto res = classify(std::move(args), input);
  INFO(res.err);
  REQUIRE(res.status == 0);
  REQUIRE(res.err.empty());
  boost::system::error_code ec;
  auto doc = boost::json::parse(res.out, ec);
  INFO(res.out);
  REQUIRE_FALSE(ec);
  REQUIRE(doc.is_object());
  // Exactly one line of output.
  CHECK(res.out.find('\n') == res.out.size() - 1);
  return doc.get_object();
}

std::string str(const boost::json::value& v) {
  return std::string{v.as_string().c_str(), v.as_string().size()};
}

/// `n` numbered filler lines that match no rule.
std::string filler(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += "step " + std::to_string(i) + " ok\n";
  return out;
}

} // namespace

TEST_CASE("classify: each class from a log file, with rule and line") {
  scratch_dir dir;
  auto rate = dir.write("rate.log", filler(20) +
                                      "HTTP 429 Too Many Requests\n"
                                      "Retry-After: 30\n" +
                                      filler(3));
  auto fatal = dir.write("fatal.log", "Error: Authentication failed\n");
  auto missing = dir.write("missing.log", "sh: 1: codex: command not found\n");
  auto flaky = dir.write("flaky.log", "connection reset by peer\n");

  auto r = classify_json({"--exit-code", "1", rate});
  CHECK(str(r.at("class")) == "rate_limit");
  CHECK(str(r.at("rule")) == "rate_limit");
  CHECK_THAT(str(r.at("line")), Catch::Contains("429"));
  CHECK(r.at("retry_after_s").to_number<double>() == 30.0);

  auto f = classify_json({"--exit-code", "1", fatal});
  CHECK(str(f.at("class")) == "fatal");
  CHECK(str(f.at("rule")) == "fatal");
  CHECK(str(f.at("line")) == "Error: Authentication failed");
  CHECK(f.at("retry_after_s").is_null());

  auto a = classify_json({"--exit-code", "1", missing});
  CHECK(str(a.at("class")) == "agent_failure");
  CHECK(str(a.at("line")) == "sh: 1: codex: command not found");

  auto a127 = classify_json({"--exit-code", "127", flaky});
  CHECK(str(a127.at("class")) == "agent_failure");
  CHECK(a127.at("line").is_null());

  auto c = classify_json({"--exit-code", "137", flaky});
  CHECK(str(c.at("class")) == "container_crash");
  CHECK(str(c.at("rule")) == "container_crash");
  CHECK(c.at("line").is_null());

  // Exit 0 is success and never classified, even with --oom.
  auto ok_oom = classify_json({"--exit-code", "0", "--oom", flaky});
  CHECK(str(ok_oom.at("class")) == "success");
  auto oom = classify_json({"--exit-code", "1", "--oom", flaky});
  CHECK(str(oom.at("class")) == "container_crash");

  auto sig = classify_json({"--exit-code", "139", "--signal", "11", flaky});
  CHECK(str(sig.at("class")) == "container_crash");

  // A reset connection is a known transient failure (rule "transient").
  auto d = classify_json({"--exit-code", "3", flaky});
  CHECK(str(d.at("class")) == "retryable");
  CHECK(str(d.at("rule")) == "transient");
  auto other = dir.write("other.log", "step 3 failed\n");
  auto e = classify_json({"--exit-code", "3", other});
  CHECK(str(e.at("class")) == "retryable");
  CHECK(str(e.at("rule")) == "default");
}

TEST_CASE("classify: human output names class, rule, line and hint") {
  scratch_dir dir;
  auto rate = dir.write("rate.log", "rate limit reached, retry after 20s\n");
  auto res = classify({"--exit-code", "1", rate});
  CHECK(res.status == 0);
  CHECK(res.out ==
        "class: rate_limit\nrule: rate_limit\n"
        "line: rate limit reached, retry after 20s\nretry after: 20 s\n");
  auto crash = classify({"--exit-code", "137", rate});
  CHECK_THAT(crash.out, Catch::StartsWith("class: container_crash\n"
                                          "rule: container_crash\nline: "
                                          "(none"));
  // Control characters in the log cannot reach the terminal raw.
  auto ansi = dir.write("ansi.log", "\x1b[31mpermission denied\x1b[0m\n");
  auto esc = classify({"--exit-code", "1", ansi});
  CHECK_THAT(esc.out,
             Catch::Contains("line: \\x1b[31mpermission denied\\x1b[0m\n"));
}

TEST_CASE("classify: reads stdin for - or no file") {
  std::string log = filler(5) + "Error: quota exceeded for this project\n";
  for (auto args : {std::vector<std::string>{"--exit-code", "1", "-"},
                    std::vector<std::string>{"--exit-code", "1"}}) {
    auto res = classify_json(args, log);
    CHECK(str(res.at("class")) == "rate_limit");
    CHECK(str(res.at("line")) == "Error: quota exceeded for this project");
  }
  auto fatal = classify_json({"--exit-code", "2"}, "invalid api key\r\n");
  CHECK(str(fatal.at("class")) == "fatal");
  CHECK(str(fatal.at("line")) == "invalid api key");
}

TEST_CASE("classify: only the rule's window of last lines counts") {
  // The default rate-limit rule sees the last 100 lines.
  auto inside =
    classify_json({"--exit-code", "1"}, "429 too many requests\n" + filler(99));
  CHECK(str(inside.at("class")) == "rate_limit");
  auto outside = classify_json({"--exit-code", "1"},
                               "429 too many requests\n" + filler(100));
  CHECK(str(outside.at("class")) == "retryable");
}

TEST_CASE("classify: exit 0 is success and never classified") {
  auto res = classify({"--exit-code", "0"}, "rate limit\n");
  CHECK(res.status == 0);
  CHECK(res.out == "success (exit 0 is never classified)\n");
  auto json = classify_json({"--exit-code", "0"}, "rate limit\n");
  CHECK(str(json.at("class")) == "success");
  CHECK(json.at("rule").is_null());
  CHECK(json.at("line").is_null());
  CHECK(json.at("retry_after_s").is_null());
}

TEST_CASE("classify: --rules and --agent-cli") {
  scratch_dir dir;
  auto rules = dir.write("rules.json", R"({"rules": [
    {"id": "overloaded", "class": "rate_limit", "patterns": ["overloaded"]},
    {"id": "gone", "class": "agent_failure",
     "patterns": ["no such file.*{agent_cli}"]}]})");
  auto res = classify_json({"--exit-code", "1", "--rules", rules},
                           "API overloaded, try again in 1m30s\n");
  CHECK(str(res.at("class")) == "rate_limit");
  CHECK(str(res.at("rule")) == "overloaded");
  CHECK(res.at("retry_after_s").to_number<double>() == 90.0);
  std::string log = "exec: no such file or directory: /opt/bin/mytool\n";
  auto with_cli = classify_json(
    {"--exit-code", "1", "--rules", rules, "--agent-cli", "mytool"}, log);
  CHECK(str(with_cli.at("rule")) == "gone");
  auto other_cli = classify_json(
    {"--exit-code", "1", "--rules", rules, "--agent-cli", "othertool"}, log);
  CHECK(str(other_cli.at("rule")) == "default");
}

TEST_CASE("classify: a 20 MB binary log piped in") {
  std::mt19937_64 rng{42};
  std::string log;
  log.reserve(20 * 1024 * 1024 + 100);
  while (log.size() < 20 * 1024 * 1024) {
    auto word = rng();
    for (int i = 0; i < 8; ++i)
      log += static_cast<char>((word >> (i * 8)) & 0xff);
  }
  // The hint sits in the last line, after invalid UTF-8 and control bytes.
  log += "\n\xff\xfe\x01 quota exceeded, retry after 7s";
  log += std::string("\0\x1b\xc3", 3);
  auto res = classify_json({"--exit-code", "1", "-"}, log);
  CHECK(str(res.at("class")) == "rate_limit");
  CHECK(res.at("retry_after_s").to_number<double>() == 7.0);
  auto line = str(res.at("line"));
  CHECK_THAT(line, Catch::StartsWith("\\xff\\xfe\x01 quota exceeded"));
  CHECK_THAT(line, Catch::EndsWith(std::string("\0\x1b\\xc3", 6)));

  // One 20 MB line without a newline: kept only up to the line bound.
  std::string one_line = "too many requests " + std::string(20'000'000, 'x');
  auto long_res = classify_json({"--exit-code", "1"}, one_line);
  CHECK(str(long_res.at("class")) == "rate_limit");
  CHECK(str(long_res.at("line")).size() <= 4096);
}

TEST_CASE("classify: bad flags and unreadable files exit 2") {
  scratch_dir dir;
  auto missing_code = classify({}, "x\n");
  CHECK(missing_code.status == 2);
  CHECK_THAT(missing_code.err, Catch::Contains("--exit-code"));
  CHECK(classify({"--exit-code", "abc"}).status == 2);
  CHECK(classify({"--exit-code", "300"}).status == 2);
  CHECK(classify({"--exit-code", "1", "--signal", "-1"}).status == 2);
  auto missing = dir.path() + "/nope.log";
  auto unreadable = classify({"--exit-code", "1", missing});
  CHECK(unreadable.status == 2);
  CHECK(unreadable.err == "tasksup classify: cannot open " + missing +
                            ": No such file or directory\n");
  auto bad_rules = dir.write("rules.json", R"({"rules": [{"id": "x"}]})");
  auto rules_res = classify({"--exit-code", "1", "--rules", bad_rules}, "x\n");
  CHECK(rules_res.status == 2);
  CHECK(rules_res.err == "tasksup classify: " + bad_rules +
                           ": /rules/0: missing required key \"class\"\n");
  auto dir_as_log = classify({"--exit-code", "1", dir.path()});
  CHECK(dir_as_log.status == 2);
  CHECK_THAT(dir_as_log.err, Catch::Contains("cannot read " + dir.path()));
}
